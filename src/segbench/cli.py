"""The ``segbench`` command: one subcommand per pipeline stage, plus parameter and results checks.

``dvc repro`` calls these; they can also be run by hand, e.g. to re-score one model.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from segbench import __version__
from segbench.console import PrintableFormatter, full_disk, full_disk_line, printable

DESCRIPTION = """\
segbench: a reproducible, statistics-first benchmark for 3D medical image segmentation.

Pipeline (dvc.yaml): predict -> score -> track -> compare -> report.
  predict   run a model adapter on a dataset      -> predictions/<dataset>/<model>/
  score     metrics per case and structure         -> scores/<dataset>/<model>/
  track     log the scores as one MLflow run       -> mlruns/ (+ tracking/<dataset>/<model>.json)
  import    published per-case scores (no masks)   -> scores/<published set>/<model>/
  compare   statistics from the MLflow runs        -> results/<dataset>.json
  export    a results file's per-case rows          -> challengeR's long CSV or the generic CSV (docs/published.md)
  cross-dataset  real boards ranking the same models, side by side -> crossdataset/real_boards.json
  report    static leaderboard site                -> site/
  show      the leaderboards and verdicts in this terminal, or as md/tsv/json (from results/);
            --summary: how often each board's #1 is real
  evaluate  folders of predictions -> leaderboard, outside DVC and MLflow (--gt LABELS/ --pred NAME=DIR ... --out OUT/)
  prune-runs  delete the MLflow runs no checked-out output names (after returning from an experiment; docs/guide.md)
Calibration audit (calibration/dvc.yaml, `dvc repro calibration/dvc.yaml`; docs/methodology.md "Calibration audit"):
  calibrate score   simulated models of known quality, every case -> calibration/scores/
  calibrate audit   CI coverage, type-I error, power by n          -> calibration/results/
Interactive benchmark (interactive/dvc.yaml, `dvc repro interactive/dvc.yaml`; docs/interactive.md):
  cases     images + references -> challenge npz    -> interactive/cases/<dataset>/
  interact  box step + 5 simulated clicks per case  -> interactive/predictions/.., interactive/scores/..
  then track, compare and report as above, under interactive/.
  `convert` and `interact --cases DIR --model NAME --out DIR` do the same on any folder, outside DVC.
  `interact --submissions DIR --cases DIR --out DIR`: a folder of CVPR 2025 Docker submissions, team by team, then a leaderboard.
Real-model pipeline (realmodel/dvc.yaml, `dvc repro realmodel/dvc.yaml`; docs/guide.md "A real model run here"):
  realmodel cases|predict|record, and score, track, compare, each with --params realmodel/params.yaml: under realmodel/.
Setup: `env create <model>` builds a real model's environment; `data fetch <dataset>` downloads a dataset.
Usually run through `dvc repro`; every stage reads params.yaml (composed from conf/ by Hydra).
Methodology (metric conventions, failure rules, statistics): docs/methodology.md.
"""


def _params(args: argparse.Namespace):
    from segbench.config.params import load_params

    return load_params(args.params)


def _root(args: argparse.Namespace, params, dataset: str) -> Path:
    """Where a stage's outputs for ``dataset`` live: under the params file's folder (``.`` for params.yaml; a pipeline
    of its own keeps its params.yaml and outputs in its folder, e.g. realmodel/), an interactive dataset's under its
    ``interactive/``."""
    from segbench.stages.paths import output_root

    return Path(args.params).parent / output_root(params, dataset)


def _cmd_predict(args: argparse.Namespace) -> None:
    from segbench.stages.predict import run_predict

    params = _params(args)
    run_predict(
        params, args.dataset, args.model, device=args.device, allow_unverified_weights=args.allow_unverified_weights, root=_root(args, params, args.dataset)
    )


def _cmd_env(args: argparse.Namespace) -> None:
    from segbench.config.params import model_from_conf
    from segbench.models.envs import create

    create(model_from_conf(Path(args.conf), args.model), dry_run=args.dry_run)


def _cmd_data(args: argparse.Namespace) -> None:
    from segbench.config.params import dataset_from_conf
    from segbench.datasets.download import fetch

    fetch(dataset_from_conf(Path(args.conf), args.dataset, Path(".")), source=args.source)


def _cmd_score(args: argparse.Namespace) -> None:
    from segbench.stages.score import run_score

    params = _params(args)
    run_score(params, args.dataset, args.model, workers=args.workers, root=_root(args, params, args.dataset))


def _cmd_import(args: argparse.Namespace) -> None:
    from segbench.stages.import_ import run_import

    run_import(_params(args), args.published)


def _cmd_track(args: argparse.Namespace) -> None:
    from segbench.stages.track import run_track

    params = _params(args)
    if args.dataset is None:  # every pulled score bundle, e.g. to fill a new machine's store after `dvc pull`
        if args.model:
            raise ValueError("--model needs --dataset")
        datasets = sorted(p.name for p in Path("scores").iterdir() if p.is_dir()) if Path("scores").is_dir() else []
        if not datasets:
            raise FileNotFoundError("scores/: no score bundles to log (run `dvc pull` or `dvc repro` first)")
        for dataset in datasets:
            run_track(dataset)
            print(f"logged every score bundle of {dataset}")
        return
    if args.dataset in params.interactive_datasets:
        if args.model:
            params.interactive_model(args.model)
        run_track(args.dataset, args.model, root=_root(args, params, args.dataset))
        return
    if args.model:
        params.dataset(args.dataset), params.model(args.model)  # validates the names
    else:
        params.published_set(args.dataset)
    run_track(args.dataset, args.model, root=_root(args, params, args.dataset))


def _cmd_cases(args: argparse.Namespace) -> None:
    from segbench.stages.cases import run_cases
    from segbench.stages.paths import cases_dir

    run_cases(_params(args), args.dataset)
    print(cases_dir(args.dataset))


def _cmd_convert(args: argparse.Namespace) -> None:
    from segbench.interactive.cases import convert

    if len(args.images) != len(args.labels):
        raise ValueError(f"--images has {len(args.images)} entries, --labels {len(args.labels)}: give one label map per image")
    structures = {}
    for entry in args.structures:
        name, _, label = entry.partition("=")
        if not name or not label.isdigit():
            raise ValueError(f"--structures {entry!r}: expected NAME=LABEL_ID, e.g. liver=5")
        structures[name] = int(label)
    sources = [
        (Path(image).name.split(".")[0] if Path(image).is_file() else Path(image).name, Path(image), Path(labels))
        for image, labels in zip(args.images, args.labels)
    ]
    manifest = convert(sources, structures, Path(args.out), seed=args.seed, reference=args.reference, note=args.note)
    for case_id, entry in manifest["cases"].items():
        print(f"{case_id}: {', '.join(c['name'] for c in entry['classes'])}")


def _cmd_interact(args: argparse.Namespace) -> None:
    if bool(args.model) == bool(args.submissions):
        raise ValueError("give exactly one of --model (a model of conf/model) and --submissions (a folder of <team>.tar.gz images)")
    if args.submissions:
        _interact_submissions(args)
        return
    if args.dataset:  # the DVC stage: an interactive dataset x model of params.yaml
        from segbench.stages.interact import run_interact

        if args.cases or args.out:
            raise ValueError("--dataset takes its cases and output folders from params.yaml; drop --cases and --out")
        run_interact(_params(args), args.dataset, args.model, device=args.device, allow_unverified_weights=args.allow_unverified_weights)
        return
    if not (args.cases and args.out):
        raise ValueError("give --dataset (from params.yaml) or both --cases and --out")
    from segbench.config.params import model_from_conf
    from segbench.interactive.harness import interact
    from segbench.interactive.protocol import Scoring

    table = interact(
        Path(args.cases),
        model_from_conf(Path(args.conf), args.model),
        Path(args.out),
        reference=args.reference,
        seconds_per_class=args.seconds_per_class,
        time_limit_clock=args.time_limit_clock,
        scoring=Scoring(args.protocol_version, args.nsd_profile),
        device=args.device,
        allow_unverified_weights=args.allow_unverified_weights,
    )
    print(table[["CaseName", "DSC_AUC", "NSD_AUC", "DSC_Final", "NSD_Final", "TotalRunningTime", "over_time", "reference"]].to_string(index=False))


def _interact_submissions(args: argparse.Namespace) -> None:
    """The challenge's evaluation of a folder of Docker submissions, then segbench's leaderboard over the teams."""
    from rich.console import Console

    from segbench.interactive.protocol import Scoring
    from segbench.interactive.scores import CASE_STRUCTURE
    from segbench.interactive.submissions import LEADERBOARD_FILE, evaluate_submissions
    from segbench.report.terminal import leaderboard

    if args.dataset or not (args.cases and args.out):
        raise ValueError("--submissions needs --cases and --out (not --dataset)")
    if args.time_limit_clock != "wall":
        raise ValueError("--submissions runs containers, whose time limit is on the wall clock (the challenge's); drop --time-limit-clock")
    limits = {
        key: value
        for key, value in (
            ("memory", args.memory),
            ("cpus", args.cpus),
            ("pids_limit", args.pids_limit),
            ("max_output_bytes", args.max_output_mb and args.max_output_mb << 20),
            ("max_output_files", args.max_output_files),
        )
        if value is not None
    }
    if args.allow_root:
        limits["user"] = None
    results = evaluate_submissions(
        Path(args.submissions),
        Path(args.cases),
        Path(args.out),
        limits=limits,
        seconds_per_class=args.seconds_per_class,
        scoring=Scoring(args.protocol_version, args.nsd_profile),
        reference=args.reference,
        device=args.device or "cpu",
    )
    console = Console()
    for team, entry in results["dataset"]["submissions"].items():
        if entry["status"] == "evaluated":
            console.print(
                f"{team}: {entry['n_cases']} cases in {entry['seconds']:.0f} s, {entry['n_cases_with_failed_steps']} with failed steps, "
                f"{entry['n_over_time']} over time: {Path(args.out) / team / (team + '_metrics.csv')}",
                highlight=False,
                soft_wrap=True,
            )
        else:
            console.print(printable(f"{team}: NOT EVALUATED: {entry['reason']}"), markup=False, highlight=False, soft_wrap=True)
    if results["analysis"] is None:
        raise SystemExit("no submission could be evaluated")
    for metric in ("DSC_AUC", "NSD_AUC", "DSC_Final", "NSD_Final"):
        console.print(
            printable(leaderboard(results, CASE_STRUCTURE, metric, width=console.width)),  # type: ignore[arg-type]  # a results document
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"every metric, class and step: segbench show {Path(LEADERBOARD_FILE).stem} --results {args.out} [--structure NAME]", highlight=False, soft_wrap=True
    )


def _cmd_calibrate_score(args: argparse.Namespace) -> None:
    from segbench.stages.calibration_scores import run_calibration_scores

    run_calibration_scores(_params(args), workers=args.workers)


def _cmd_calibrate_audit(args: argparse.Namespace) -> None:
    from segbench.stages.calibration_audit import run_calibration_audit

    for path in run_calibration_audit(_params(args)):
        print(path)


def _cmd_compare(args: argparse.Namespace) -> None:
    from segbench.stages.compare import run_compare

    params = _params(args)
    run_compare(params, args.dataset, root=_root(args, params, args.dataset))


def _cmd_realmodel_cases(args: argparse.Namespace) -> None:
    from segbench.stages.realmodel_cases import run_cases

    run_cases(_params(args), Path(args.params), args.dataset)


def _cmd_realmodel_predict(args: argparse.Namespace) -> None:
    from segbench.stages.predict import run_predict
    from segbench.stages.realmodel_predict import run_measured_predict

    params = _params(args)
    root = _root(args, params, args.dataset)
    record = run_measured_predict(params, args.dataset, args.model, root, lambda: run_predict(params, args.dataset, args.model, root=root))
    print(f"{args.model}: {record['wall_time_s']} s, peak {record['peak_memory_gb']} GB")


def _cmd_realmodel_record(args: argparse.Namespace) -> None:
    from segbench.stages.realmodel_record import run_record

    print(run_record(args.dataset, args.model, Path(args.params).parent))


def _cmd_report(args: argparse.Namespace) -> None:
    from segbench.report import build_site

    files = sorted(Path(args.results).glob("*.json"))
    if not files:
        raise FileNotFoundError(f"{args.results}: no results JSON to report (run the compare stage)")
    for page in build_site(files, Path(args.out), calibration=args.calibration, interactive_site=args.interactive_site, cross_dataset=args.cross_dataset):
        print(page)


def _cmd_cross_dataset(args: argparse.Namespace) -> None:
    from segbench.stages.crossdataset import run_cross_dataset

    run_cross_dataset(Path(args.results), Path(args.config), Path(args.out))


def _show_width(requested: int | None) -> int | None:
    """The columns ``segbench show`` wraps its text at: ``--width``, else the terminal's, else ``COLUMNS`` when piped, else
    none (piped output is not cut to an artificial 80 columns)."""
    if requested is not None:
        return requested
    if sys.stdout.isatty():
        return os.get_terminal_size(sys.stdout.fileno()).columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def _cmd_show(args: argparse.Namespace) -> None:
    """Print leaderboards and verdicts from results/<dataset>.json in the terminal, or as md, tsv or json."""
    from segbench.base.io import recorded_files
    from segbench.report.terminal import render
    from segbench.stats.results_file import read_results

    folder = Path(args.results)
    available = sorted(p.stem for p in folder.glob("*.json"))
    # never a dataset left out without a word: a results file dvc.lock records but the folder lacks is an error
    absent = {path: record for path, record in recorded_files(folder).items() if path.suffix == ".json" and not path.exists()}
    absent = {path: record for path, record in absent.items() if not args.datasets or path.stem in args.datasets}
    if absent:
        path, record = next(iter(absent.items()))
        others = f" ({len(absent) - 1} more)" if len(absent) > 1 else ""
        rest = f"; `segbench show {' '.join(available)}` shows the others" if available else ""
        raise FileNotFoundError(
            f"{folder / path.name}: missing{others}, though {record.lock} records it as stage {record.stage}'s "
            f"output: `dvc repro` writes it again (it names what stops it){rest}"
        )
    if not available:
        raise FileNotFoundError(f"{folder}: no results JSON to show (run `dvc repro` first)")
    unknown = [d for d in args.datasets if d not in available]
    if unknown:
        raise ValueError(f"no results for {', '.join(unknown)} in {folder}/ (have {', '.join(available)})")
    files = [folder / f"{d}.json" for d in args.datasets or available]
    if args.summary:
        from segbench.report.boards import summary_text

        sys.stdout.write(printable(summary_text([read_results(f) for f in files])))
        return
    text = render(
        [read_results(f) for f in files],
        structure=args.structure,
        metric=args.metric,
        fmt_name=args.format,
        width=_show_width(args.width) if args.format == "text" else None,
        detail=args.detail,
        cells=args.cells,
    )
    sys.stdout.write(printable(text))


def _check_show(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``show``'s options that need another one: an error (exit 2) naming what is missing, never silently ignored."""
    if args.metric is not None and args.structure is None:
        parser.error("show: --metric needs --structure (a metric is shown within one structure's leaderboards)")
    if args.width is not None and args.format != "text":
        parser.error(f"show: --width is for --format text (the default); --format {args.format} is not wrapped")
    if args.summary and (args.structure is not None or args.format != "text"):
        parser.error("show: --summary is one text table over the boards; it takes no --structure, --metric or --format")
    if args.cells and (args.detail or args.structure is not None or args.format != "text"):
        parser.error("show: --cells is the text overview's one line per cell; it takes no --detail, --structure or --format")
    if args.width is not None and args.width < 20:
        parser.error(f"show: --width must be at least 20 columns, got {args.width}")


def _cmd_prune_runs(args: argparse.Namespace) -> None:
    """Delete (--purge: for good; --dry-run: only list) the MLflow runs of results/' datasets no checked-out output names."""
    from segbench.assembly.pruning import prune_runs

    stale = prune_runs(Path(args.results), dry_run=args.dry_run, purge=args.purge)
    done = "would delete" if args.dry_run else "purged" if args.purge else "deleted"
    for run in stale:
        print(f"{done} {run.dataset} {run.kind} run {run.name} ({run.run_id})")
    if not stale:
        print("every run of the store is named by a checked-out output: nothing to delete")


def _cmd_export(args: argparse.Namespace) -> None:
    from segbench.assembly.export import export_results
    from segbench.stats.results_file import read_results

    path = args.results or Path("results") / f"{args.dataset}.json"
    print(export_results(read_results(path), args.format, args.out, args.metric))


def _cmd_reanalyze(args: argparse.Namespace) -> None:
    """Recompute every statistic from the per-case rows a results file stores; fail on any difference."""
    from segbench.stats import reanalyze, reanalyze_source
    from segbench.stats.results_file import read_results

    for path in args.results:
        results = read_results(path, verify=False)  # what a file changed since its stage wrote it still holds
        differences = reanalyze(results["analysis"])
        if "source_analysis" in results:  # segbench's CIs under a source's correction, beside its published verdicts
            differences += reanalyze_source(results["analysis"], results["source_analysis"])
        lesions: Mapping[str, Any] = results.get("lesions") or {}
        for unit in ("case", "matched", "lesion"):  # the lesion-wise analyses
            if lesions.get(unit) is not None:
                differences += [f"lesions.{unit}: {d}" for d in reanalyze(lesions[unit])]
        coverage: Mapping[str, Any] = results.get("coverage") or {}
        for model, analysis in (coverage.get("analyses") or {}).items():  # models on their own cases
            differences += [f"coverage.{model}: {d}" for d in reanalyze(analysis)]
        if differences:
            raise ValueError(f"{path}: {len(differences)} statistic(s) differ from a recomputation; first: {differences[0]}")
        print(f"{path}: every statistic re-derived from its per-case rows")


def _cmd_evaluate(args: argparse.Namespace) -> None:
    """Score prediction folders against a reference folder, print the leaderboard and write the outputs (segbench.evaluation)."""
    from segbench import evaluation

    args.pred = args.pred or []
    if not args.pred and not args.pred_config:
        raise ValueError("no predictions given: --pred NAME=DIR (repeat per model) or --pred-config conf/predictions/<name>.yaml")
    label_map = None
    if args.label_map:
        pairs = [entry.partition("=") for entry in args.label_map]
        if any(not key.strip().isdigit() or not eq or not name for key, eq, name in pairs):
            raise ValueError(
                f"--label-map {' '.join(args.label_map)}: expected ID=STRUCTURE ... (the files' label ids -> the dataset's "
                "structure names, e.g. 1=kidney 2=tumor 3=cyst)"
            )
        label_map = {int(key): name for key, _, name in pairs}
    folders = dict(entry.partition("=")[::2] for entry in args.pred)
    dicom_labels = {name: int(label) for name, _, label in (entry.rpartition("=") for entry in args.dicom_labels or ()) if name and label.isdigit()}
    if len(dicom_labels) != len(args.dicom_labels or ()):
        raise ValueError(f"--dicom-labels {' '.join(args.dicom_labels)}: expected SEGMENT_OR_ROI_NAME=LABEL_ID")
    if any(not name or not folder for name, folder in folders.items()) or len(folders) != len(args.pred):
        raise ValueError(f"--pred {' '.join(args.pred)}: expected NAME=DIR, one distinct NAME per folder")
    result = evaluation.evaluate(
        args.gt,
        folders,
        dataset=args.dataset,
        conf=args.conf,
        structures=args.structures or (),
        metadata=args.metadata,
        profile=args.profile,
        sensitivity_profiles=args.sensitivity_profiles or (),
        missing=args.missing,
        simulated=args.simulated or (),
        dicom_labels=dicom_labels or None,
        workers=args.workers,
        name=args.name,
        pred_configs=args.pred_config or (),
        label_map=label_map,
    )
    print(printable(result.summary(width=args.width or 140, cells=True)), end="")  # a user's few cells: each with #1's mean [CI]
    for path in evaluation.write(result, Path(args.out), report=args.report):
        print(path)


def _cmd_params(args: argparse.Namespace) -> None:
    """Compose conf/ with Hydra and validate it: print it, --check it against params.yaml, or --write it there."""
    from segbench.base.io import write_text_atomic
    from segbench.config.validation import compose_params

    composed = compose_params(Path(args.conf), args.overrides)
    if args.write:
        write_text_atomic(Path(args.params), yaml.safe_dump(composed, sort_keys=False))
    elif args.check:
        if not Path(args.params).is_file():
            raise FileNotFoundError(f"{args.params}: not found (run `segbench params --write`)")
        if yaml.safe_load(Path(args.params).read_text(encoding="utf-8")) != composed:
            raise ValueError(f"{args.params} differs from the composition of {args.conf}/ (run `segbench params --write`)")
    else:
        print(yaml.safe_dump(composed, sort_keys=False), end="")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="segbench", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"segbench {__version__}")
    parser.add_argument(
        "--params",
        type=Path,
        default=Path("params.yaml"),
        help="composed parameters (default: params.yaml); the stages write under its folder (realmodel/params.yaml: realmodel/)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, and an error's full traceback (also SEGBENCH_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def pair(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dataset", required=True, help="dataset name from params.yaml (e.g. kits23)")
        p.add_argument("--model", required=True, help="model name from params.yaml")

    p = sub.add_parser("predict", help="run a model adapter on every case of a dataset")
    pair(p)
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: the model's config)")
    p.add_argument(
        "--allow-unverified-weights",
        action="store_true",
        help="run although the weights are not verified against models/<model>.dvc (the manifest marks the results unpublishable)",
    )
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("env", help="create a real model's own environment from the pins in its config")
    p.add_argument("action", choices=["create"])
    p.add_argument("model", help="model name (conf/model/<model>.yaml)")
    p.add_argument("--conf", default="conf", help="Hydra config folder (default: conf)")
    p.add_argument("--dry-run", action="store_true", help="print the commands instead of running them")
    p.set_defaults(func=_cmd_env)

    p = sub.add_parser("data", help="download (or verify a manual download of) a dataset into data/<dataset>/")
    p.add_argument("action", choices=["fetch"])
    p.add_argument("dataset", help="dataset name (conf/dataset/<dataset>.yaml)")
    p.add_argument("--conf", default="conf", help="Hydra config folder (default: conf)")
    p.add_argument("--source", type=Path, help="an already downloaded archive or folder to verify and ingest")
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("score", help="score predictions against the reference (docs/methodology.md#3-metric-conventions)")
    pair(p)
    p.add_argument("--workers", type=int, help="cases scored in parallel (default: params scoring.workers)")
    p.set_defaults(func=_cmd_score)

    p = sub.add_parser("import", help="turn a published set of per-case scores into score bundles (kind=published)")
    p.add_argument("--published", required=True, help="published set name from params.yaml (e.g. touchstone_totalsegmentator)")
    p.set_defaults(func=_cmd_import)

    p = sub.add_parser(
        "track",
        help="log score bundles as MLflow runs (one per dataset x model); without --dataset every bundle under scores/ "
        "(after `dvc pull` on a new machine: fills its MLflow store, idempotent)",
    )
    p.add_argument("--dataset", help="dataset, published set or interactive dataset name (default: every dataset under scores/)")
    p.add_argument("--model", help="one model; omitted: every bundle of the dataset")
    p.set_defaults(func=_cmd_track)

    p = sub.add_parser("convert", help="turn NIfTI images (or DICOM series folders) and reference label maps into challenge npz cases")
    p.add_argument("--images", nargs="+", required=True, help="NIfTI images or DICOM series folders; the case id is the file or folder name")
    p.add_argument("--labels", nargs="+", required=True, help="reference label maps on the images' grids, in the same order")
    p.add_argument("--structures", nargs="+", required=True, help="NAME=LABEL_ID of the reference, e.g. liver=5 spleen=1")
    p.add_argument("--out", required=True, help="case folder to write: imgs/, gts/, cases.json")
    p.add_argument("--reference", choices=["manual", "pseudo"], default="manual", help="manual annotation or a model's output (pseudo)")
    p.add_argument("--note", default="", help="what the reference is, recorded in cases.json")
    p.add_argument("--seed", type=int, default=2025, help="seed of the box rule's shifts (default: 2025, the challenge's)")
    p.set_defaults(func=_cmd_convert)

    p = sub.add_parser("cases", help="build an interactive dataset's npz cases from params.yaml (interactive/dvc.yaml's cases stage)")
    p.add_argument("--dataset", required=True, help="interactive dataset name from params.yaml (e.g. totalseg_example)")
    p.set_defaults(func=_cmd_cases)

    p = sub.add_parser("interact", help="run an interactive model on box and click prompts (CVPR 2025 protocol) over a case folder")
    p.add_argument("--dataset", help="interactive dataset from params.yaml (the DVC stage; outputs under interactive/)")
    p.add_argument("--cases", help="case folder: imgs/<case>.npz and gts/<case>.npz (challenge format)")
    p.add_argument("--model", help="interactive model (conf/model/<model>.yaml, kind interactive)")
    p.add_argument(
        "--submissions",
        help="instead of --model: a folder of CVPR 2025 Docker submissions (<team>.tar.gz or <team>.tar), each "
        "loaded, run on every case and removed, as the challenge's script does; then a leaderboard over the teams",
    )
    p.add_argument(
        "--out", help="output folder: metrics.csv, segs/, records/, run.json (with --submissions: <team>/<team>_metrics.csv ... and leaderboard.json)"
    )
    p.add_argument("--conf", default="conf", help="Hydra config folder (default: conf)")
    p.add_argument("--reference", choices=["manual", "pseudo"], help="the reference's kind when the case folder has no cases.json")
    p.add_argument("--seconds-per-class", type=float, default=90.0, help="time limit of a case's model calls per class (default: 90)")
    p.add_argument(
        "--time-limit-clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: the challenge's clock; cpu: the model processes' CPU seconds, for CPU runs on a shared machine (default: wall)",
    )
    p.add_argument(
        "--protocol-version",
        choices=["2025-03-25", "2025-03-04"],
        default="2025-03-25",
        help="the challenge's scoring by the date of its change: 2025-03-25, AUC over the 5 clicks (final); 2025-03-04, AUC "
        "over the box step and the clicks (default: 2025-03-25)",
    )
    p.add_argument(
        "--nsd-profile",
        choices=["deepmind", "segauge"],
        default="deepmind",
        help="NSD's definition: deepmind, the challenge's surface Dice (its SurfaceDice.py); segauge, segbench's engine (default: deepmind)",
    )
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: the model's config; with --submissions: cpu)")
    p.add_argument("--memory", help="with --submissions: each container's memory limit (default: 8g; the challenge gave 32G)")
    p.add_argument("--cpus", type=float, help="with --submissions: each container's CPU limit (default: 2)")
    p.add_argument("--pids-limit", type=int, help="with --submissions: each container's process limit (default: 1024)")
    p.add_argument("--max-output-mb", type=int, help="with --submissions: cap on what one call leaves in its outputs folder, MB (default: 2048)")
    p.add_argument("--max-output-files", type=int, help="with --submissions: cap on the files one call leaves in its outputs folder (default: 1000)")
    p.add_argument(
        "--allow-root",
        action="store_true",
        help="with --submissions: run each image as its own user (root for most) instead of nobody; the leaderboard records it",
    )
    p.add_argument("--allow-unverified-weights", action="store_true", help="run although the weights are not verified against their pin")
    p.set_defaults(func=_cmd_interact)

    p = sub.add_parser("compare", help="statistics of all models of a dataset, read from MLflow (docs/methodology.md#5-statistics-protocol)")
    p.add_argument("--dataset", required=True, help="dataset, published set or interactive dataset name")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("calibrate", help="calibration audit (calibration/dvc.yaml): CI coverage, type-I error and power on simulated models")
    steps = p.add_subparsers(dest="step", required=True, metavar="STEP")
    step = steps.add_parser("score", help="simulate and score every case (cached; calibration/dvc.yaml's score stage)")
    step.add_argument("--workers", type=int, help="cases simulated and scored in parallel (default: params calibration.workers)")
    step.set_defaults(func=_cmd_calibrate_score)
    step = steps.add_parser("audit", help="redraw cases and analyse them as compare would (calibration/dvc.yaml's audit stage)")
    step.set_defaults(func=_cmd_calibrate_audit)

    p = sub.add_parser("realmodel", help="the real-model pipeline's own stages (realmodel/dvc.yaml; run with --params realmodel/params.yaml)")
    steps = p.add_subparsers(dest="step", required=True, metavar="STEP")
    step = steps.add_parser("cases", help="the dataset's images and liver masks from the data bundle (its entry's sources)")
    step.add_argument("--dataset", required=True, help="dataset name from the params file (e.g. totalseg_liver)")
    step.set_defaults(func=_cmd_realmodel_cases)
    step = steps.add_parser("predict", help="the predict stage, its wall time and peak memory written to runs/<model>.json")
    pair(step)
    step.set_defaults(func=_cmd_realmodel_predict)
    step = steps.add_parser("record", help="runs/<model>.json as run.* tags on the model's MLflow run (after the track stage)")
    pair(step)
    step.set_defaults(func=_cmd_realmodel_record)

    p = sub.add_parser("report", help="build the static leaderboard site from results/*.json")
    p.add_argument("--results", default="results", help="folder of results JSON (default: results)")
    p.add_argument("--out", default="site", help="site folder (default: site)")
    p.add_argument("--calibration", type=Path, help="the calibration audit's audit.json (calibration/results/audit.json): adds its page")
    p.add_argument("--interactive-site", type=Path, help="the interactive pipeline's site folder (interactive/site): linked from the index")
    p.add_argument("--cross-dataset", type=Path, help="the cross-dataset stage's JSON (crossdataset/real_boards.json): adds its page")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("cross-dataset", help="every pair of real boards ranking the same models, side by side (rank correlation, moves)")
    p.add_argument("--results", default="results", help="folder of results JSON (default: results)")
    p.add_argument("--config", default="conf/cross_dataset.yaml", help="which model is which across sets (default: conf/cross_dataset.yaml)")
    p.add_argument("--out", default="crossdataset/real_boards.json", help="the view (default: crossdataset/real_boards.json)")
    p.set_defaults(func=_cmd_cross_dataset)

    p = sub.add_parser("show", help="leaderboards and verdicts in the terminal, from results/*.json")
    p.add_argument("datasets", nargs="*", help="dataset names (default: every results/<dataset>.json)")
    p.add_argument("--results", default="results", help="folder of results JSON (default: results)")
    p.add_argument("--structure", help="one structure's full leaderboards instead of the overview")
    p.add_argument("--metric", help="with --structure: only this metric")
    p.add_argument(
        "--detail",
        action="store_true",
        help="text: each cell stacked with its verdict sentence, P(rank 1) and notes (default: per structure and #1, its cells by verdict)",
    )
    p.add_argument("--cells", action="store_true", help="text: the overview as one line per cell in columns, with #1's mean [CI]")
    p.add_argument(
        "--format",
        default="text",
        choices=("text", "md", "tsv", "json"),
        help="text (default, wrapped at spaces), md, or tsv/json: one row per dataset, structure, metric and model",
    )
    p.add_argument("--width", type=int, help="text: columns to wrap at (default: the terminal's; piped: COLUMNS if set, else unwrapped)")
    p.add_argument(
        "--summary",
        action="store_true",
        help="how often each board's #1 is real: per board, the share of cells whose #1 is separable from #2, the median "
        "co-winner set, the share whose #1 changes when one case is removed, each with its n; SIMULATED boards apart",
    )
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("prune-runs", help="delete the MLflow runs no checked-out output names (the way back from an experiment)")
    p.add_argument("--results", default="results", help="folder of results JSON whose datasets' runs are checked (default: results)")
    p.add_argument("--dry-run", action="store_true", help="list the runs, delete none")
    p.add_argument("--purge", action="store_true", help="remove them for good, artifacts too (mlflow gc), not only mark them deleted")
    p.set_defaults(func=_cmd_prune_runs)

    p = sub.add_parser("export", help="write a dataset's per-case rows as challengeR's long CSV or the generic CSV (docs/published.md)")
    p.add_argument("--dataset", required=True, help="dataset or published set name: reads results/<dataset>.json")
    p.add_argument("--results", type=Path, help="the results JSON (default: results/<dataset>.json)")
    p.add_argument("--format", required=True, choices=("challenger_csv", "generic_csv"), help="the published format to write")
    p.add_argument("--metric", help="challenger_csv: the metric to write (a challengeR table holds one)")
    p.add_argument("--out", required=True, type=Path, help="CSV file to write")
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser("reanalyze", help="re-derive every statistic of results JSON files from their own per-case rows")
    p.add_argument("results", nargs="+", type=Path, help="results/<dataset>.json files")
    p.set_defaults(func=_cmd_reanalyze)

    p = sub.add_parser("evaluate", help="score folders of predictions against reference label maps and analyse them, outside DVC and MLflow")
    p.add_argument("--gt", required=True, type=Path, help="folder of reference label maps, <case>.nii.gz (or .nii)")
    p.add_argument(
        "--pred",
        action="append",
        metavar="NAME=DIR",
        help="a model's prediction folder: <case>.nii.gz, .nii, .npy (on the reference grid), DICOM-SEG or RTSTRUCT .dcm; repeat per model",
    )
    p.add_argument(
        "--pred-config",
        action="append",
        type=Path,
        metavar="FILE",
        help="a model given as the pipeline takes it, conf/predictions/<name>.yaml (dataset, path, output, output_format, label_map): "
        "remapped and resampled onto the references as the predict stage does; repeat per model",
    )
    p.add_argument(
        "--label-map",
        nargs="+",
        metavar="ID=STRUCTURE",
        help="with --dataset: the --pred folders' label ids -> the dataset's structures (e.g. 5=kidney 6=tumor); the files are "
        "then remapped and resampled by affine onto the references, as --pred-config does",
    )
    p.add_argument("--out", required=True, type=Path, help="output folder: per_case.csv, results/<name>.json, site/ (with --report)")
    p.add_argument("--report", action="store_true", help="also write the leaderboard site to OUT/site")
    p.add_argument("--dataset", help="a dataset config (conf/dataset/<name>.yaml): its regions, NSD tolerances, labels, metadata and subgroups")
    p.add_argument("--conf", type=Path, default=Path("conf"), help="Hydra config folder for --dataset (default: conf)")
    p.add_argument("--structures", nargs="+", help="region names of --dataset or of the label map, or NAME=ID[+ID...][:TOLERANCE_MM]")
    p.add_argument("--metadata", type=Path, help="CSV with a case_id column; every other column is a subgroup field")
    p.add_argument("--profile", default="segauge", help="metric-definition profile (default: segauge)")
    p.add_argument("--sensitivity-profiles", nargs="+", help="further profiles for the implementation-sensitivity analysis")
    p.add_argument(
        "--missing",
        choices=["error", "own_cases", "worst_case", "shared_cases"],
        default="error",
        help="a model lacking cases, or with a file that cannot be scored: error naming them (default); otherwise each such case "
        "is a failure, flagged and named in a warning, and own_cases: the model estimated on its cases beside the board; "
        "worst_case: ranked with those failures; shared_cases: the board on the cases every model has "
        "(docs/methodology.md#41-coverage)",
    )
    p.add_argument("--simulated", nargs="+", help="models to mark SIMULATED (e.g. segbench.models.simulated outputs)")
    p.add_argument(
        "--dicom-labels", nargs="+", metavar="NAME=ID", help="DICOM-SEG segment labels / RTSTRUCT ROI names -> label ids (default: segment / ROI number)"
    )
    p.add_argument("--name", help="the leaderboard's name (default: --dataset, else the --gt folder's name)")
    p.add_argument("--workers", type=int, default=1, help="cases scored in parallel (default: 1)")
    p.add_argument("--width", type=int, help="columns to print the leaderboard in (default: 140)")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("params", help="compose conf/ with Hydra and validate it: print it (params.yaml untouched), --check or --write")
    p.add_argument("--conf", default="conf", help="Hydra config folder (default: conf)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit non-zero if params.yaml differs from the composition")
    mode.add_argument("--write", action="store_true", help="write the composition to params.yaml")
    p.add_argument("overrides", nargs="*", help="Hydra overrides as for `dvc exp run -S`, e.g. 'model=[sim_dilate_1mm]' stats.ci_method=bca")
    p.set_defaults(func=_cmd_params)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand; bad input (segbench's ValueError, KeyError, RuntimeError) and what the machine refuses (OSError: a
    missing file, a permission, a full disk) is one line ``segbench <command>: error: ...`` and exit code 1;
    SEGBENCH_DEBUG=1 or -v shows the traceback instead."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "show":
        _check_show(parser, args)
    handler = logging.StreamHandler()
    handler.setFormatter(PrintableFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=[handler])
    try:
        args.func(args)
    except Exception as exc:
        full = full_disk(exc)
        if (full is None and not isinstance(exc, (ValueError, OSError, RuntimeError, KeyError))) or args.verbose or os.environ.get("SEGBENCH_DEBUG") == "1":
            raise
        print(printable(f"segbench {args.command}: error: {full_disk_line(full) if full is not None else exc}"), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

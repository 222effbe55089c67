"""Typos fail fast and cheaply: one line naming the bad value and the valid ones, before any stage runs (each run's
wall and CPU seconds are recorded as the test's `seconds` property and printed, never asserted: the goal is < 10 s);
and a user's own score files kept outside data/ leave data.dvc untouched.

Real commands throughout: the `segbench` script, `dvc exp run` on a throwaway DVC project (DVC composes conf/
with Hydra itself, loading hydra_plugins/ first), `dvc repro` on the guide's own published-set example (docs/published.md).
"""

from __future__ import annotations

import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from projects import Projects
from tests_support import command_env, commit_all, run_command

MODELS = "ctfm_wholebody, litemedsam"  # the start of conf/model/'s sorted listing


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, str]:
    """The command's result, and its wall and CPU seconds (its own and its children's) as text."""

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    start, start_cpu = time.monotonic(), cpu()
    result = subprocess.run(args, cwd=cwd, env=env or command_env(), capture_output=True, text=True, check=False)
    seconds = cpu() - start_cpu
    return result, f"{' '.join(args)}: {time.monotonic() - start:.1f} s wall, {seconds:.1f} s CPU"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["data", "fetch", "nope"],
            "segbench data: error: unknown dataset 'nope'; conf/dataset/ has: amos22, btcv, kits23, msd_spleen, totalseg_liver, totalsegmentator",
        ),
        (["env", "create", "nope"], f"segbench env: error: unknown model 'nope'; conf/model/ has: {MODELS}"),
        (["params", "stats.ci_method=bcaa"], "stats.ci_method must be one of ('percentile', 'bca', 'skew_t'), got 'bcaa'"),
        (["params", "stats.ci_level=calibrated"], "stats.ci_level must be one of ('audited', 'nominal'), got 'calibrated'"),
        (["params", "model=[no_such_model]"], f"unknown model 'no_such_model'; conf/model/ has: {MODELS}"),
        (["params", "dataset=[kits23,nope]"], "unknown dataset 'nope'; conf/dataset/ has: amos22, btcv"),
        (["params", "stats.multiple_comparison=holmes"], "stats.multiple_comparison must be one of ('holm', 'bonferroni'), got 'holmes'"),
        (["params", "stats.case_alignment=paired"], "stats.case_alignment must be one of ('shared', 'pairwise_complete'), got 'paired'"),
        (["params", "stats.confidence=1.5"], "stats.confidence must be a number in (0, 1), got 1.5"),
        (["params", "stats.n_resamples=0"], "stats.n_resamples must be an integer >= 1, got 0"),
        (["params", "stats.ci_methd=bca"], "unknown key 'stats.ci_methd'; stats has: alpha, case_alignment, ci_level, ci_method, confidence"),
        (
            ["params", "dataset.kits23.cases=[case_00000,case_99999]"],
            "configured cases have no reference file in " + "{root}/data/kits23/labels: ['case_99999']; it has 489 cases, case_00000 to case_00588",
        ),
        (["params", "scoring.profile=segaug"], "scoring.profile 'segaug' is not a metric-definition profile; known: ['deepmind'"),
    ],
)
def test_typo_is_one_line_listing_the_valid_values(root: Path, args: list[str], expected: str, record_property: Callable) -> None:
    before = (root / "params.yaml").read_bytes()
    result, timing = _run(["segbench", *args], root)
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert expected.format(root=root) in result.stderr and result.stderr.startswith(f"segbench {args[0]}: error: "), result.stderr
    record_property("seconds", timing)
    print(timing)
    assert (root / "params.yaml").read_bytes() == before


def test_traceback_on_request(root: Path) -> None:
    result, _ = _run(["segbench", "data", "fetch", "nope"], root, env={**command_env(), "SEGBENCH_DEBUG": "1"})
    assert result.returncode == 1 and "Traceback" in result.stderr and "MissingConfigException" in result.stderr


def test_params_previews_a_composition_and_writes_only_when_asked(root: Path, tmp_path: Path) -> None:
    before = (root / "params.yaml").read_bytes()
    result, _ = _run(["segbench", "params", "model=[sim_erode_1mm]", "stats.ci_method=bca"], root)
    assert result.returncode == 0, result.stderr
    shown = yaml.safe_load(result.stdout)
    assert list(shown["model"]) == ["sim_erode_1mm"] and shown["stats"]["ci_method"] == "bca" and shown["validated"] is True
    assert (root / "params.yaml").read_bytes() == before
    assert _run(["segbench", "params", "--check"], root)[0].returncode == 0
    check, _ = _run(["segbench", "params", "--check", "stats.ci_method=bca"], root)
    differs = "segbench params: error: params.yaml differs from the composition of conf/ (run `segbench params --write`)\n"
    assert check.returncode == 1 and check.stderr == differs
    target = tmp_path / "params.yaml"
    assert _run(["segbench", "--params", str(target), "params", "--write", "model=[sim_erode_1mm]"], root)[0].returncode == 0
    assert yaml.safe_load(target.read_text(encoding="utf-8"))["model"].keys() == {"sim_erode_1mm"}


@pytest.fixture
def dvc_project(root: Path, tmp_path: Path) -> Path:
    """The real pipeline (dvc.yaml, conf/, hydra_plugins/, params.yaml) in a new git + DVC project with Hydra on.

    Of the data only the KiTS23 label maps (a link to the bundle's), which configured case ids are checked against: a
    typo must stop `dvc exp run` at composition, before DVC looks at any stage.
    """
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("dvc.yaml", "params.yaml", ".gitignore"):
        shutil.copy(root / name, proj / name)
    for name in ("conf", "hydra_plugins"):
        shutil.copytree(root / name, proj / name, ignore=shutil.ignore_patterns("__pycache__"))
    labels = proj / "data" / "kits23" / "labels"  # under data/, which .gitignore leaves to DVC
    labels.parent.mkdir(parents=True)
    labels.symlink_to(root / "data" / "kits23" / "labels")
    run_command(["git", "init", "-q"], proj)
    run_command(["dvc", "init", "-q"], proj)
    run_command(["dvc", "config", "hydra.enabled", "true"], proj)
    commit_all(proj, "base")
    return proj


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("stats.ci_method=bcaa", "stats.ci_method must be one of ('percentile', 'bca', 'skew_t'), got 'bcaa'"),
        ("stats.alpha=5", "stats.alpha must be a number in (0, 1), got 5"),
        ("dataset=[amos22]", "model 'sim_dilate_1mm' labels ['cyst', 'kidney', 'tumor'] that dataset 'amos22' does not have"),
        # a config missing from a group: hydra_plugins/' last config source lists the group's (Hydra's message names none)
        ("model=[sim_dilate_1m]", f"unknown model 'sim_dilate_1m'; {{proj}}/conf/model/ has: {MODELS}"),
        ("model=sim_dilate_1m", f"unknown model 'sim_dilate_1m'; {{proj}}/conf/model/ has: {MODELS}"),
        ("dataset=[kits23,nope]", "unknown dataset 'nope'; {proj}/conf/dataset/ has: amos22, btcv, kits23"),
        (
            "dataset.kits23.cases=[case_00000,case_99999]",
            "configured cases have no reference file in {proj}/data/kits23/labels: ['case_99999']; it has 489 cases, case_00000 to case_00588",
        ),
        # a new key added as Hydra's message advises: the validation lists the settings there are
        # Hydra refuses a new key before any plugin or resolver sees the composition, naming the key and advising "+" (the
        # README's exception: `segbench params` lists the settings, test_typo_is_one_line_listing_the_valid_values)
        ("stats.ci_methd=bca", "Could not override 'stats.ci_methd'"),
        ("+stats.ci_methd=bca", "unknown stats setting(s) ['ci_methd']; settings are alpha, case_alignment, ci_level, ci_method, confidence"),
    ],
)
def test_dvc_exp_run_typo_fails_at_composition(dvc_project: Path, override: str, expected: str, record_property: Callable) -> None:
    before = (dvc_project / "params.yaml").read_bytes()
    result, timing = _run(["dvc", "exp", "run", "-S", override], dvc_project)
    assert result.returncode != 0
    first = next(line for line in (result.stdout + result.stderr).splitlines() if line.startswith("ERROR"))
    assert expected.format(proj=dvc_project) in first, result.stderr
    assert "Config search path" not in result.stderr
    record_property("seconds", timing)
    print(timing)
    assert "Running stage" not in result.stdout + result.stderr
    assert (dvc_project / "params.yaml").read_bytes() == before and not (dvc_project / "dvc.lock").exists()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["predictions=[example_subset]"], "path userdata/example_subset does not exist (conf/predictions/example_subset.yaml)"),
        (
            ["predictions=[example_subset]", "predictions.example_subset.path=/tmp"],
            "path /tmp is outside the project {proj}: dvc.lock would record a path no clone has",
        ),
    ],
)
def test_a_predictions_folder_missing_or_outside_the_project_fails_at_composition(
    dvc_project: Path, overrides: list[str], expected: str, record_property: Callable
) -> None:
    """`dvc exp run` with a folder of predictions that is not there, or lies outside the project (dvc.lock would record a
    path no clone has): refused while composing, before any stage runs, with the commands that bring it in."""
    before = (dvc_project / "params.yaml").read_bytes()
    result, timing = _run(["dvc", "exp", "run", *(arg for o in overrides for arg in ("-S", o))], dvc_project)
    assert result.returncode != 0
    first = next(line for line in (result.stdout + result.stderr).splitlines() if line.startswith("ERROR"))
    assert expected.format(proj=dvc_project) in first, result.stderr
    assert "`dvc add userdata/example_subset`" in first and "path: userdata/example_subset in conf/predictions/example_subset.yaml" in first
    record_property("seconds", timing)
    print(timing)
    assert "Running stage" not in result.stdout + result.stderr
    assert (dvc_project / "params.yaml").read_bytes() == before and not (dvc_project / "dvc.lock").exists()


def test_dvc_composition_is_segbenchs(dvc_project: Path, tmp_path: Path) -> None:
    """DVC's own composition function (as `dvc exp run -S` calls it, plugins from the project root, in a fresh process)
    loads the resolver and yields segbench's composition, `validated: true` included."""
    from segbench.config.validation import compose_params

    out = tmp_path / "composed.yaml"
    code = (
        f"from dvc.utils.hydra import compose_and_dump; compose_and_dump({str(out)!r}, {str(dvc_project / 'conf')!r}, None, "
        f"'config', {str(dvc_project)!r}, ['stats.ci_method=bca'])"
    )
    run_command([sys.executable, "-c", code], tmp_path)
    composed = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert composed == compose_params(dvc_project / "conf", ["stats.ci_method=bca"])
    assert composed["validated"] is True and composed["stats"]["ci_method"] == "bca"


#: a pipeline of the real one's shape, in seconds: per dataset x model of params.yaml, predictions then scores
SMALL_PIPELINE = """\
stages:
  predict:
    matrix:
      dataset: ${dataset}
      model: ${model}
    cmd: mkdir -p predictions/${item.dataset}/${item.model} && echo ${item.model} > predictions/${item.dataset}/${item.model}/masks
    params:
      - model.${item.model}
    outs:
      - predictions/${item.dataset}/${item.model}
  score:
    matrix:
      dataset: ${dataset}
      model: ${model}
    cmd: mkdir -p scores/${item.dataset}/${item.model} && cp predictions/${item.dataset}/${item.model}/masks scores/${item.dataset}/${item.model}/
    deps:
      - predictions/${item.dataset}/${item.model}
    outs:
      - scores/${item.dataset}/${item.model}
"""


@pytest.fixture
def small_project(dvc_project: Path, root: Path) -> Path:
    """``dvc_project`` with SMALL_PIPELINE for dvc.yaml and a model of the user's own, conf/model/mine.yaml (not in
    conf/config.yaml's default list)."""
    (dvc_project / "dvc.yaml").write_text(SMALL_PIPELINE, encoding="utf-8")
    sim = (root / "conf" / "model" / "sim_erode_1mm.yaml").read_text(encoding="utf-8")
    (dvc_project / "conf" / "model" / "mine.yaml").write_text(sim.replace("sim_erode_1mm:", "mine:", 1), encoding="utf-8")
    commit_all(dvc_project, "a small pipeline and the user's model")
    return dvc_project


def _models(proj: Path) -> list[str]:
    return list(yaml.safe_load((proj / "params.yaml").read_text(encoding="utf-8"))["model"])


def _outputs(proj: Path) -> dict[str, bytes]:
    return {str(f.relative_to(proj)): f.read_bytes() for d in ("predictions", "scores") for f in sorted((proj / d).rglob("*")) if f.is_file()}


def _exp_run(proj: Path, *overrides: str) -> str:
    """``dvc exp run -S ...`` in the workspace; the experiment's name (DVC prints "Ran experiment(s): NAME")."""
    out = run_command(["dvc", "exp", "run", *[a for o in overrides for a in ("-S", o)]], proj)
    return re.search(r"Ran experiment\(s\): (\S+)", out).group(1)  # type: ignore[union-attr]


def test_set_param_composes_from_conf_and_exp_apply_restores(small_project: Path) -> None:
    """docs/guide.md, "What -S replaces": `+model=[mine]` appends to conf/config.yaml's models; the next run composes
    from conf/ again (its own -S only), so mine leaves params.yaml and its outputs the workspace; `dvc exp apply`
    of the run that had it brings both back."""
    defaults = _models(small_project)
    with_mine = _exp_run(small_project, "+model=[mine]")
    assert _models(small_project) == [*defaults, "mine"] and (small_project / "scores" / "kits23" / "mine" / "masks").is_file()
    kept = (small_project / "params.yaml").read_bytes(), _outputs(small_project)
    _exp_run(small_project, "stats.ci_method=bca")
    assert _models(small_project) == defaults and not (small_project / "predictions" / "kits23" / "mine").exists()
    run_command(["dvc", "exp", "apply", with_mine], small_project)
    assert ((small_project / "params.yaml").read_bytes(), _outputs(small_project)) == kept


def test_failed_composition_leaves_the_workspace(small_project: Path) -> None:
    """The user's own set as a conf/ file (docs/guide.md: conf/experiment/<name>.yaml, `-S +experiment=<name>`), run in
    the workspace; then `dvc exp run -S` with a bad value fails at composition: params.yaml (the experiment's, not the
    committed one) byte for byte, dvc.lock, and every prediction and score as they were."""
    (small_project / "conf" / "experiment").mkdir()
    (small_project / "conf" / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - /model: [mine]\n  - /published: [segauge_kits23_seed]\n", encoding="utf-8"
    )
    defaults = _models(small_project)
    _exp_run(small_project, "+experiment=mine")
    composed = yaml.safe_load((small_project / "params.yaml").read_text(encoding="utf-8"))
    assert list(composed["model"]) == [*defaults, "mine"] and "segauge_kits23_seed" in composed["published"]
    before = [(small_project / n).read_bytes() for n in ("params.yaml", "dvc.lock")], _outputs(small_project)
    assert "scores/kits23/mine/masks" in before[1]
    for override in ("model=[nope]", "+model=[nope]", "stats.ci_method=bcaa", "dataset.kits23.cases=[case_99999]", "+experiment=nope"):
        result, _ = _run(["dvc", "exp", "run", "-S", "+experiment=mine", "-S", override], small_project)
        assert result.returncode != 0 and "Running stage" not in result.stdout + result.stderr, override
        assert ([(small_project / n).read_bytes() for n in ("params.yaml", "dvc.lock")], _outputs(small_project)) == before, override


@pytest.mark.slow
def test_guide_user_score_files_leave_data_dvc_untouched(root: Path, projects: Projects) -> None:
    """The guide's challengeR example (docs/published.md), its file where the guide puts it, through `dvc repro` of its
    stages: data.dvc stays as committed (a file under data/ would change it, and the "Data version" of every dataset's page)."""
    readme = (root / "docs" / "published.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if b.startswith("my_challenge:"))
    spec = yaml.safe_load(block)["my_challenge"]
    proj = projects.new(["model=[sim_dilate_1mm]", "dataset.kits23.cases=[case_00030,case_00110]", "stats.n_resamples=200", "published=[]"])
    (proj / "conf" / "published" / "my_challenge.yaml").write_text(yaml.safe_dump({"my_challenge": spec}), encoding="utf-8")
    rows = [f"{alg},case_{i:03d},liver,{0.9 - 0.01 * i - (0.05 if alg == 'team_b' else 0):.3f}" for alg in ("team_a", "team_b") for i in range(8)]
    csv = proj / spec["path"]
    csv.parent.mkdir(parents=True)
    csv.write_text("alg_name,case,task,value\n" + "\n".join(rows) + "\n", encoding="utf-8")
    run_command(
        [
            "segbench",
            "params",
            "--write",
            "model=[sim_dilate_1mm]",
            "dataset.kits23.cases=[case_00030,case_00110]",
            "stats.n_resamples=200",
            "published=[my_challenge]",
        ],
        proj,
    )
    commit_all(proj, "the user's score file, in git")
    data_dvc = (proj / "data.dvc").read_bytes()
    run_command(["dvc", "repro", "compare-published@my_challenge"], proj)  # import, track, compare of the user's set
    assert (proj / "data.dvc").read_bytes() == data_dvc
    assert "data.dvc" not in run_command(["dvc", "status", "data.dvc"], proj).replace("Data and pipelines are up to date.", "")
    results = yaml.safe_load((proj / "results" / "my_challenge.json").read_text(encoding="utf-8"))
    assert results["analysis"]["structures"]["liver"]["metrics"]["dice"]["ranking"]["order"] == ["team_a", "team_b"]

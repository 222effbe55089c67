"""Every pair of a real model and a dataset composes a valid params.yaml, and dvc plans its stages.

As `dvc exp run -S model=<m> -S dataset=<d>` does: Hydra composition of conf/, validation by
parse_params, then a real `dvc repro --dry` of predict stages covering every model and dataset in a temporary
copy of the project holding all 40 pairs (later stages depend on predict's outputs, which a dry
run cannot create; `dvc stage list` shows them).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from adapters_support import DATASETS, REAL_MODELS, ROOT
from segbench.config.params import parse_params
from segbench.config.validation import compose_params


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_real_model_composes_with_the_dataset(dataset: str) -> None:
    for model in REAL_MODELS:
        raw = compose_params(ROOT / "conf", [f"model={model}", f"dataset={dataset}"])
        params = parse_params(raw, ROOT)
        assert list(params.models) == [model] and list(params.datasets) == [dataset]
        pin = f"models/{model if model != 'totalsegmentator_roi' else 'totalsegmentator'}.dvc"  # roi shares the total weights
        assert params.model(model).kind == "inference" and params.model(model).weights["pin"] == pin
        assert (ROOT / params.model(model).weights["pin"]).is_file()


def _run(args: list[str], cwd: Path) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_dvc_repro_dry_plans_every_real_pair(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("dvc.yaml", "data.dvc", ".gitignore"):
        shutil.copy(ROOT / name, proj / name)
    for name in ("conf", "src", "models"):
        shutil.copytree(ROOT / name, proj / name, ignore=shutil.ignore_patterns("__pycache__"))
    _run(["git", "init", "-q"], proj)
    _run(["dvc", "init", "-q"], proj)
    raw = compose_params(proj / "conf", [f"model=[{','.join(REAL_MODELS)}]", f"dataset=[{','.join(DATASETS)}]"])
    parse_params(raw, proj)
    (proj / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    for dataset in DATASETS:  # the pinned bundle is not pulled here; the stage graph only needs the paths
        (proj / "data" / dataset).mkdir(parents=True)
    # predict is where a real model runs; its downstream stages read its outputs, which a dry run
    # cannot create, so the dry run targets the predict stages and `dvc stage list` shows the rest
    # (every model and every dataset at least once: dvc costs seconds per target on 2 cores)
    planned = [(DATASETS[i % len(DATASETS)], model) for i, model in enumerate(REAL_MODELS)]
    out = _run(["dvc", "repro", "--dry", "--single-item", *(f"predict@{d}-{m}" for d, m in planned)], proj)
    for dataset, model in planned:
        assert f"Running stage 'predict@{dataset}-{model}'" in out
        assert f"> segbench predict --dataset {dataset} --model {model}" in out
    stages = _run(["dvc", "stage", "list"], proj)
    for dataset in DATASETS:
        for model in REAL_MODELS:
            for stage in ("predict", "score", "track"):
                assert f"{stage}@{dataset}-{model}" in stages
        assert f"compare@{dataset}" in stages
    assert "report" in stages

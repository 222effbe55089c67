"""params.yaml is the composition of conf/, and bad parameters fail at the boundary."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from adapters_support import CLASS_LISTS
from segbench.config.params import ConfigError, load_params, parse_params
from segbench.config.validation import compose_params
from segbench.models.vocabulary import TOTALSEGMENTATOR_NAMES


def test_committed_params_equal_the_composition_of_conf(root: Path) -> None:
    committed = yaml.safe_load((root / "params.yaml").read_text(encoding="utf-8"))
    assert committed == compose_params(root / "conf"), "params.yaml is stale: run `segbench params --write`"


def test_default_experiment_is_kits23_with_simulated_models(root: Path) -> None:
    params = load_params(root / "params.yaml")
    assert list(params.datasets) == ["kits23"]
    assert len(params.models) >= 3
    assert all(m.kind == "simulated" for m in params.models.values())
    regions = {r.name: r for r in params.dataset("kits23").regions}
    assert regions["kidney_and_mass"].labels == (1, 2, 3)
    assert regions["mass"].labels == (2, 3)
    assert regions["tumor"].labels == (2,)
    assert [regions[n].nsd_tolerance_mm for n in ("kidney_and_mass", "mass", "tumor")] == [1.0331, 1.1329, 1.1498]


def test_override_selects_one_model(root: Path) -> None:
    composed = compose_params(root / "conf", ["model=sim_erode_1mm"])
    assert list(composed["model"]) == ["sim_erode_1mm"]


def test_unknown_names_are_errors(root: Path) -> None:
    params = load_params(root / "params.yaml")
    with pytest.raises(ConfigError, match="unknown dataset 'amos'"):
        params.dataset("amos")
    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        params.model("nope")


def test_region_naming_unknown_structure_is_an_error(root: Path) -> None:
    raw = compose_params(root / "conf")
    raw["dataset"]["kits23"]["regions"]["tumor"]["structures"] = ["liver"]
    with pytest.raises(ConfigError, match="unknown structures \\['liver'\\]"):
        parse_params(raw, root)


def test_simulated_model_labelling_unknown_structure_is_an_error(root: Path) -> None:
    raw = compose_params(root / "conf")
    name = next(iter(raw["model"]))
    raw["model"][name]["label_map"][4] = "liver"
    with pytest.raises(ConfigError, match="does not have"):
        parse_params(raw, root)


def test_real_model_label_outside_the_vocabulary_is_an_error(root: Path) -> None:
    """A typo in a real model's label map would make KiTS' kidney n/a for that model without a word."""
    raw = compose_params(root / "conf", ["model=[totalsegmentator]"])
    label_map = raw["model"]["totalsegmentator"]["label_map"]
    label_map[next(k for k, v in label_map.items() if v == "kidney_left")] = "kidnee_left"
    with pytest.raises(ConfigError, match="model 'totalsegmentator': .*outside the canonical vocabulary: 'kidnee_left' \\(did you mean 'kidney_left'"):
        parse_params(raw, root)


def test_dataset_label_outside_the_vocabulary_is_an_error(root: Path) -> None:
    raw = compose_params(root / "conf")
    raw["dataset"]["kits23"] = yaml.safe_load(yaml.safe_dump(raw["dataset"]["kits23"]).replace("tumor", "tumour"))  # regions too
    with pytest.raises(ConfigError, match="dataset 'kits23': .*'tumour' \\(did you mean 'tumor'"):
        parse_params(raw, root)


def test_interactive_scoring_comes_from_the_config_and_bad_values_are_named(root: Path) -> None:
    """The committed interactive dataset is scored as the challenge scores; a typo fails at the boundary, naming where."""
    params = load_params(root / "params.yaml")
    scoring = params.interactive_dataset("totalseg_example").scoring
    assert (scoring.version, scoring.nsd_profile) == ("2025-03-25", "deepmind")
    for key, value, message in (
        ("protocol_version", "2025-03", "protocol_version must be one of 2025-03-25, 2025-03-04, got '2025-03'"),
        ("nsd_profile", "surfels", "nsd_profile must be one of deepmind, segauge, got 'surfels'"),
    ):
        raw = compose_params(root / "conf")
        raw["interactive_dataset"]["totalseg_example"][key] = value
        with pytest.raises(ConfigError, match=f"interactive dataset 'totalseg_example'.*{message}"):
            parse_params(raw, root)


def test_vocabulary_is_totalsegmentators_published_class_names() -> None:
    lists = ("totalsegmentator_total", "totalsegmentator_total_mr", "totalsegmentator_v1")
    assert TOTALSEGMENTATOR_NAMES == {name for key in lists for name in CLASS_LISTS[key]["classes"].values()}


def test_dvc_composes_params_with_hydra(root: Path) -> None:
    """`dvc exp run -S` must recompose params.yaml from conf/ (DVC's Hydra integration is on)."""
    import subprocess

    out = subprocess.run(["dvc", "config", "hydra.enabled"], cwd=root, capture_output=True, text=True, check=False).stdout
    assert out.strip() == "true"


def test_an_image_model_block_is_checked(root: Path) -> None:
    """An interactive model's image: block (docs/interactive.md, Models): pinned archive, challenge defaults, no stray keys."""
    raw = compose_params(root / "conf")
    entry = raw["interactive_model"]["region_growing"]
    del entry["command"], entry["environment"]
    entry["image"] = {"archive": "models/team.tar.gz", "sha256": "ab" * 32, "cpus": 1}
    image = parse_params(raw, root).interactive_models["region_growing"].image
    assert image is not None and image.archive == Path("models/team.tar.gz") and image.spec.command == ("/bin/bash", "-c", "sh predict.sh")
    assert (image.spec.inputs_mount, image.spec.outputs_mount, image.spec.cpus) == ("/workspace/inputs", "/workspace/outputs", 1.0)
    entry["image"] = {"reference": "docker.io/team/model@sha256:" + "cd" * 32, "variables": {"HOME": "/tmp"}, "mounts": {"{weights_dir}": "/w"}}
    image = parse_params(raw, root).interactive_models["region_growing"].image
    assert image is not None and image.archive is None and image.pinned
    assert image.spec.variables == {"HOME": "/tmp"} and image.spec.mounts == (("{weights_dir}", "/w"),)
    entry["image"] = {"reference": "docker.io/team/model:1.0"}
    assert not parse_params(raw, root).interactive_models["region_growing"].image.pinned  # a tag can move
    for bad, message in (
        ({"sha256": "ab" * 32}, "either archive .* or reference"),
        ({"archive": "t.tar", "sha256": "latest"}, "64 lowercase hex"),
        ({"archive": "t.tar", "sha256": "ab" * 32, "reference": "a:b"}, "either archive .* or reference"),
        ({"reference": "a:b", "mounts": ["/x"]}, "image.mounts must be a mapping"),
        ({"archive": "t.tar", "sha256": "ab" * 32, "gpu": 1}, r"unknown key\(s\) \['gpu'\]"),
    ):
        entry["image"] = bad
        with pytest.raises(ConfigError, match=f"model 'region_growing'.*{message}"):
            parse_params(raw, root)
    entry["image"], entry["environment"] = {"archive": "t.tar", "sha256": "ab" * 32}, {"type": "harness"}
    with pytest.raises(ConfigError, match="image: block has environment.type container, got 'harness'"):
        parse_params(raw, root)
    del entry["image"]
    entry["environment"], entry["command"] = {"type": "container"}, ["predict"]
    with pytest.raises(ConfigError, match="environment.type container needs an image: block"):
        parse_params(raw, root)


def test_lesion_setting_comes_from_scoring_lesions_and_bad_values_are_named(root: Path) -> None:
    """scoring.lesions: the dataset's own lesion structures (a name its schema lacks is skipped), the profile and the
    sensitivity profiles; an unknown key or profile is an error naming the setting."""
    raw = compose_params(root / "conf", [])
    setting = parse_params(raw, root).lesion_setting("kits23")
    assert [(s.name, s.labels) for s in setting.structures] == [("tumor", (2,)), ("cyst", (3,))]
    assert (setting.profile, setting.extra_profiles, setting.strata_ml) == ("brats", ("panoptica", "panoptica_merge", "brats2023"), (1.0, 10.0))
    for change, message in [
        ({"profle": "brats"}, "unknown key"),
        ({"profile": "panoptika"}, "unknown lesion profile 'panoptika'"),
        ({"structures": "tumor"}, "must be a list of label names"),
    ]:
        bad = {**raw, "scoring": {**raw["scoring"], "lesions": {**raw["scoring"]["lesions"], **change}}}
        with pytest.raises(ConfigError, match=message):
            parse_params(bad, root)
    none = {**raw, "scoring": {**raw["scoring"], "lesions": {**raw["scoring"]["lesions"], "structures": ["liver_tumor"]}}}
    assert parse_params(none, root).lesion_setting("kits23") is None


def test_only_a_simulated_model_reads_the_reference_labels(root: Path) -> None:
    """A real model handed the reference labels is scored against its own input (a `cp` of the labels as a "model"):
    refused, naming the model, for an inference model and an interactive one alike."""
    raw = compose_params(root / "conf", ["model=[sim_dilate_1mm]"])
    raw["model"]["sim_dilate_1mm"]["kind"] = "inference"
    raw["interactive_model"]["region_growing"]["input"] = "reference_labels"
    for where, kind in (("model 'sim_dilate_1mm'", "inference"), ("model 'region_growing'", "interactive")):
        with pytest.raises(ConfigError, match=f"{where}: input reference_labels is for simulated models .* kind '{kind}' is scored .*cannot read them"):
            parse_params(raw, root)
        raw["model"]["sim_dilate_1mm"]["kind"] = "simulated"
    raw["interactive_model"]["region_growing"]["input"] = "images"
    assert parse_params(raw, root).model("sim_dilate_1mm").input == "reference_labels"

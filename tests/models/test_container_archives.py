"""A team's image archive read as hostile data (segbench.models.container): before any runtime sees it, its manifest
is read within bounds, its image id must be a digest, and a gzip'd archive may not decompress past the disk's room."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import shutil
import tracemalloc
from pathlib import Path

import pytest

from repo_paths import TOTALSEG_EXAMPLE
from segbench import cli
from segbench.interactive import cases, submissions
from segbench.models import container
from tests_support import header_bomb, write_tar

DIGEST = "ab" * 32


def _manifest(config: object) -> bytes:
    return json.dumps([{"Config": config, "RepoTags": ["team:latest"], "Layers": []}]).encode()


def test_the_image_id_is_the_manifests_digest(tmp_path: Path) -> None:
    for config in (f"{DIGEST}.json", f"blobs/sha256/{DIGEST}"):  # docker's legacy and OCI layouts
        archive = write_tar(tmp_path / "team.tar.gz", {"VERSION": b"1.0", "manifest.json": _manifest(config)}, gzipped=True)
        assert container.archive_image_id(archive) == DIGEST


@pytest.mark.parametrize("config", ["--all.json", "sha256:--all", "../../etc/passwd", f"{DIGEST[:-1]}.json", "A" * 64])
def test_an_image_id_that_is_no_digest_is_refused(tmp_path: Path, config: str) -> None:
    """The id goes to `podman rmi --force <id>` after the team's cases: a config named --all.json would remove every image."""
    archive = write_tar(tmp_path / "evil.tar", {"manifest.json": _manifest(config)})
    with pytest.raises(container.ContainerError, match=r"evil.tar: manifest.json's image config .* is not a sha256 digest"):
        container.archive_image_id(archive)


@pytest.mark.parametrize("manifest", [b"{}", b'{"0": {"Config": "x"}}', b"[1]", b"[]", b'[{"Config": 7}]', b"null"])
def test_a_manifest_of_another_shape_names_no_config(tmp_path: Path, manifest: bytes) -> None:
    archive = write_tar(tmp_path / "odd.tar", {"manifest.json": manifest})
    with pytest.raises(container.ContainerError, match="odd.tar: manifest.json names no image config"):
        container.archive_image_id(archive)


@pytest.mark.parametrize("manifest", [b"[" * 100_000, b"\xff\xfe\x00", b"[{"], ids=["nested past the recursion limit", "not UTF-8", "cut short"])
def test_an_unreadable_manifest_is_no_archive(tmp_path: Path, manifest: bytes) -> None:
    archive = write_tar(tmp_path / "odd.tar", {"manifest.json": manifest})
    with pytest.raises(container.ContainerError, match="odd.tar: not a docker save archive"):
        container.archive_image_id(archive)


def test_a_manifest_claiming_more_than_a_manifest_needs_is_refused_unread(tmp_path: Path) -> None:
    """64 MiB of JSON whitespace, 64 kB gzip'd: the claim in its header is refused before a byte is read."""
    manifest = _manifest(f"{DIGEST}.json") + b" " * (64 << 20)
    archive = write_tar(tmp_path / "bomb.tar.gz", {"manifest.json": manifest}, gzipped=True)
    assert archive.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(container.ContainerError, match=rf"bomb.tar.gz: its manifest.json claims {len(manifest):,} bytes, more than 1,048,576"):
            container.archive_image_id(archive)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak:,} bytes allocated"


def test_members_are_read_up_to_a_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    members = {f"layer{i}/json": b"{}" for i in range(6)}
    archive = write_tar(tmp_path / "many.tar", {**members, "manifest.json": _manifest(f"{DIGEST}.json")})
    assert container.archive_image_id(archive) == DIGEST
    monkeypatch.setattr(container, "MAX_ARCHIVE_MEMBERS", 6)
    with pytest.raises(container.ContainerError, match=r"many.tar: more than 6 members \(headers included\); refusing the archive"):
        container.archive_image_id(archive)


def test_a_gzip_bomb_is_refused_before_it_fills_the_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = write_tar(tmp_path / "team.tar.gz", {"manifest.json": _manifest(f"{DIGEST}.json"), "layer.tar": bytes(3 << 20)}, gzipped=True)
    with container._uncompressed(archive) as (plain, _, _):  # under the caps: the plain tar, whole
        assert plain.read_bytes() == gzip.decompress(archive.read_bytes())
    truncated = tmp_path / "cut.tar.gz"
    truncated.write_bytes(archive.read_bytes()[:-100])
    with pytest.raises(container.ContainerError, match="cut.tar.gz: not a whole gzip stream"):
        with container._uncompressed(truncated):
            pass
    monkeypatch.setattr(container, "MAX_IMAGE_BYTES", 1 << 20)
    with pytest.raises(container.ContainerError, match=r"team.tar.gz: decompresses to more than 1,048,576 bytes \(the cap of 1,048,576 bytes\)"):
        with container._uncompressed(archive):
            pass
    tar = tmp_path / "team.tar"
    tar.write_bytes(gzip.decompress(archive.read_bytes()))
    with pytest.raises(container.ContainerError, match=rf"team.tar: {tar.stat().st_size:,} bytes, more than the cap of 1,048,576"):
        with container._uncompressed(tar):
            pass
    monkeypatch.setattr(container, "FREE_SPACE_RESERVE_BYTES", 1 << 60)  # no room at all on the temporary folder's file system
    with pytest.raises(container.ContainerError, match=r"decompresses to more than 0 bytes \(the free space of .* less"):
        with container._uncompressed(archive):
            pass


@pytest.mark.parametrize(("kind", "words"), [(b"L", "GNU long name"), (b"x", "pax")])
def test_a_long_name_or_pax_header_bomb_is_refused_while_streaming(tmp_path: Path, kind: bytes, words: str) -> None:
    """A 1-2 MB archive whose member header carries 1 GiB of long name: reading its manifest cost 2.1 GB of RSS per MB (here 256 MiB)."""
    claimed = 1 << 28
    archive = header_bomb(tmp_path / "bomb.tar.gz", kind, claimed)
    assert archive.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(container.ContainerError, match=rf"bomb.tar.gz: member 1's {words} header claims {claimed:,} bytes, more than 1,048,576"):
            container.archive_image_id(archive)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak:,} bytes allocated"


def test_every_compression_a_runtime_accepts_is_inflated_here_with_the_cap_or_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An xz archive named .tar.gz and a plain archive whose layer is a gzip'd tar were inflated by podman, unbounded."""
    plain = write_tar(tmp_path / "plain.tar", {"manifest.json": _manifest(f"{DIGEST}.json"), "layer.tar": bytes(3 << 20)})
    for name, compress in (("xz.tar.gz", lzma.compress), ("bz.tar", bz2.compress), ("gz.tar", gzip.compress)):
        (tmp_path / name).write_bytes(compress(plain.read_bytes()))
        assert container.archive_image_id(tmp_path / name) == DIGEST
    zstd = tmp_path / "zstd.tar"
    zstd.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(100))
    with pytest.raises(container.ContainerError, match="zstd.tar: zstd-compressed, which segbench cannot inflate with a size cap; refusing it"):
        container.archive_image_id(zstd)
    layered = write_tar(
        tmp_path / "layered.tar",
        {"manifest.json": _manifest(f"{DIGEST}.json"), "abc/layer.tar": gzip.compress(bytes(3 << 20)), "def/layer.tar": lzma.compress(bytes(3 << 20))},
    )
    assert container.archive_image_id(layered) == DIGEST
    monkeypatch.setattr(container, "MAX_IMAGE_BYTES", 4 << 20)  # each layer fits; their sum does not
    with pytest.raises(container.ContainerError, match=r"layered.tar: layer 'def/layer.tar' \(xz\) inflates past the room left under the cap of 4,194,304"):
        container.archive_image_id(layered)
    monkeypatch.setattr(container, "MAX_IMAGE_BYTES", 2 << 20)
    with pytest.raises(container.ContainerError, match=r"xz.tar.gz: decompresses to more than 2,097,152 bytes"):
        container.archive_image_id(tmp_path / "xz.tar.gz")


def test_an_archive_name_on_no_file_is_an_error_not_a_team_dropped(tmp_path: Path) -> None:
    """A FIFO, a folder or a dangling link named <team>.tar.gz was skipped, and the team was missing from the leaderboard unsaid."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    write_tar(folder / "teama.tar", {"manifest.json": _manifest(f"{DIGEST}.json")})
    (folder / "notes.txt").write_text("not a submission", encoding="utf-8")
    assert [s.team for s in submissions.find_submissions(folder)] == ["teama"]
    for make in (os.mkfifo, os.mkdir, lambda p: os.symlink(tmp_path / "absent.tar.gz", p)):
        odd = folder / "teamb.tar.gz"
        make(odd)
        with pytest.raises(ValueError, match=r"teamb.tar.gz: named as a team's archive but not a regular file"):
            submissions.find_submissions(folder)
        odd.rmdir() if odd.is_dir() and not odd.is_symlink() else odd.unlink()


def test_a_team_name_that_cannot_name_files_ends_that_team_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 230-character name made the whole run exit with "File name too long"; names with a control character, other
    punctuation or `..` refused the whole run. Each is now its own team's failure; a space or a non-ASCII letter is a valid team."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    bad = {
        "a" * 230: "bytes (UTF-8), more than 100",
        "new\nline": "holds '\\n'",
        "back\\slash": "holds '\\\\'",
        " lead": "must begin with a letter or digit",
        "semi;colon": "holds ';'",
    }
    for name in [*bad, "Équipe Zoë", "team b"]:
        write_tar(folder / f"{name}.tar", {"manifest.json": b"not json"})
    write_tar(folder / "..evil.tar", {"manifest.json": b"not json"})  # the team is the name before its first dot: none
    found = {s.team: s for s in submissions.find_submissions(folder)}
    assert found["équipe zoë"].problem is None and found["team b"].problem is None
    assert "..evil.tar: the team name (the file name before its first dot) is empty; rename the archive" in str(found[""].problem)
    for name, reason in bad.items():
        assert reason in str(found[name.lower()].problem) and "rename the archive" in str(found[name.lower()].problem), found[name.lower()]
    if shutil.which("podman") is None:
        return
    cases_dir = tmp_path / "cases"
    example = TOTALSEG_EXAMPLE
    cases.convert([("ct_sm", example / "ct_sm.nii.gz", example / "seg_total.nii.gz")], {"spleen": 1}, cases_dir, seed=2025, reference="pseudo")
    monkeypatch.setenv(container.RUNTIME_ENV, "podman")
    results = submissions.evaluate_submissions(folder, cases_dir, tmp_path / "out")
    entries = results["dataset"]["submissions"]
    assert len(entries) == 8 and all(entry["status"] == "not_evaluated" for entry in entries.values())
    assert "is empty" in entries[""]["reason"]
    for name in ("Équipe Zoë", "team b"):  # valid names: the team got as far as its archive
        assert entries[name.lower()]["reason"].endswith(f"{name}.tar: not a docker save archive (no readable manifest.json)"), entries[name.lower()]
    for name, reason in bad.items():
        assert reason in entries[name.lower()]["reason"]
    assert json.loads((tmp_path / "out" / submissions.LEADERBOARD_FILE).read_text(encoding="utf-8"))["dataset"]["submissions"] == entries


def test_untrusted_submissions_run_on_podman_and_docker_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docker has one image store per daemon, where a team's archive can name an image it did not bring or re-point
    another's tag: the organiser's path runs podman (the default even where docker comes first on PATH) and refuses docker
    with its reason before any team is read."""
    programs = tmp_path / "bin"
    programs.mkdir()
    for program in ("docker", "podman"):
        (programs / program).write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        (programs / program).chmod(0o755)
    monkeypatch.setenv("PATH", str(programs))
    monkeypatch.delenv(container.RUNTIME_ENV, raising=False)
    assert container.Runtime.from_environment().program == "docker"  # the trusted path's default: the first on PATH
    assert submissions.untrusted_runtime().program == "podman"
    monkeypatch.setenv(container.RUNTIME_ENV, "docker")
    argv = ["interact", "--submissions", str(tmp_path / "absent"), "--cases", str(tmp_path), "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 1
    line = capsys.readouterr().err.strip()
    assert line == (
        "segbench interact: error: SEGBENCH_CONTAINER_RUNTIME=docker: untrusted submissions run only on podman, which gives each "
        "team an image store of its own (docker has one store per daemon, where a team could run or re-tag another's image); set it to podman"
    ), line
    assert not (tmp_path / "out").exists()
    with pytest.raises(container.ContainerError, match="an image store of a team's own needs podman"):
        with container.private_store(container.Runtime("docker")):
            pass

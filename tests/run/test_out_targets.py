"""``--out`` (and every other file a command writes) onto something that is not a regular file: a FIFO, a symbolic
link, a character device. The one writer (``run.files``) refuses it with exit 4 naming the path and leaves it as it
was (it used to rename a regular file over it: as root ``--out /dev/full`` replaced the device with a file)."""

import os
import stat
from pathlib import Path

import pytest

from laya_robustness.__main__ import main

from helpers.report_folders import write_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def folders(tmp_path):
    return (write_folder(tmp_path / "checkpoint-1", {"a": 0.8}, {"a": "pass"}),
            write_folder(tmp_path / "checkpoint-2", {"a": 0.8}, {"a": "pass"}))


def _commands(folders, out: Path) -> dict[str, list[str]]:
    old, new = (str(f) for f in folders)
    return {"compare": ["compare", old, new, "--out", str(out)], "trend": ["trend", old, new, "--out", str(out)],
            "summarize": ["summarize", f"{new}/predictions.jsonl.gz", "--out", str(out)]}


@pytest.mark.parametrize("command", ["compare", "trend", "summarize"])
def test_out_onto_a_fifo_is_refused_and_the_fifo_stays(folders, tmp_path, command, capsys):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    assert main(_commands(folders, fifo)[command]) == 4
    assert capsys.readouterr().err == (
        f"error: {fifo} is a FIFO (named pipe), not a regular file: refused, it is left as it is and nothing is "
        "written to it; give a path that is a regular file or does not exist yet\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nothing staged beside it


@pytest.mark.parametrize("command", ["compare", "trend", "summarize"])
def test_out_onto_a_symlink_is_refused_and_its_target_is_unchanged(folders, tmp_path, command, capsys):
    target, link = tmp_path / "kept.txt", tmp_path / "out.link"
    target.write_text("the file the link points to\n")
    link.symlink_to(target)
    assert main(_commands(folders, link)[command]) == 4
    assert f"error: {link} is a symbolic link, not a regular file: refused" in capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "the file the link points to\n"


def test_report_into_a_folder_whose_summary_md_is_a_link_writes_neither_page(folders, tmp_path, capsys):
    out, target = tmp_path / "pages", tmp_path / "kept.md"
    out.mkdir()
    target.write_text("kept\n")
    (out / "summary.md").symlink_to(target)
    assert main(["report", str(folders[1] / "predictions.jsonl.gz"), "--out", str(out)]) == 4
    assert f"error: {out / 'summary.md'} is a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["summary.md"] and target.read_text() == "kept\n"


def test_a_fixture_folder_that_is_a_link_is_refused_and_its_target_kept(tmp_path, capsys):
    target, link = tmp_path / "real", tmp_path / "rows"
    target.mkdir()
    (target / "mine.txt").write_text("mine\n")
    link.symlink_to(target, target_is_directory=True)
    assert main(["fixtures", "rows", "--out", str(link), "--rows-per-set", "2"]) == 4
    assert f"error: {link} is a symbolic link, not a folder: refused" in capsys.readouterr().err
    assert link.is_symlink() and [p.name for p in target.iterdir()] == ["mine.txt"]


def test_export_parquet_onto_a_fifo_is_refused(tmp_path, capsys):
    pytest.importorskip("datasets")
    out = tmp_path / "parquet"
    out.mkdir()
    os.mkfifo(out / "count_choice.parquet")
    assert main(["export-parquet", str(ROOT / "laya_fixtures" / "rows" / "count_choice.jsonl"), str(out)]) == 4
    assert f"error: {out / 'count_choice.parquet'} is a FIFO (named pipe)" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.lstat(out / "count_choice.parquet").st_mode)


def _char_device(tmp_path: Path) -> Path | None:
    """A character device to write to: a node of /dev/null's numbers in tmp_path where this process may make one."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        return None
    return node


def test_out_onto_a_character_device_is_refused_and_it_stays_a_device(folders, tmp_path, capsys):
    from laya_robustness.run.files import NotAFile, refuse_other  # before any write: today's code has no refusal

    devices = [p for p in (_char_device(tmp_path), Path("/dev/null")) if p is not None]
    devices = [p for p in devices if stat.S_ISCHR(os.lstat(p).st_mode) and os.access(p, os.W_OK)]
    if not devices:
        pytest.skip("no writable character device here")
    for device in devices:
        with pytest.raises(NotAFile):  # the refusal holds before a command is let near the device
            refuse_other(device)
        assert main(_commands(folders, device)["compare"]) == 4
        assert f"error: {device} is a character device, not a regular file: refused" in capsys.readouterr().err
        assert stat.S_ISCHR(os.lstat(device).st_mode)

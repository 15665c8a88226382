"""Faults while writing: a full disk (a real small file system where the machine allows one, an injected ENOSPC
otherwise), a read-only report folder and a journal line torn by kill -9 each end cleanly (exit 3 or 4 naming
the path), keep the previous complete report, and leave a run --resume can finish; report files share one mode."""

import errno
import json
import os
import pathlib
import stat
import subprocess

import pytest

from laya_robustness.run.files import write_all
from laya_robustness.run.pipeline.journal import Journal, read_journals

from helpers.gate_project import gate_command, run, scored_rows

pytest_plugins = ["pytester"]

REPORTS = ("summary.json", "predictions.jsonl.gz", "checks.json", "report.html", "summary.md")


def _files(folder):
    return {name: (folder / name).read_bytes() for name in REPORTS}


def _leftovers(folder):
    """Temporary files of a write (``.summary.json.xyz``) or a lock left in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_set_of_files_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("old a")
    (tmp_path / "b.json").write_text("old b")
    real_fsync, calls = os.fsync, []

    def full_on_the_second(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_on_the_second)
    with pytest.raises(OSError) as failed:
        write_all({tmp_path / "a.json": "new a", tmp_path / "b.json": "new b"})
    assert failed.value.errno == errno.ENOSPC and failed.value.filename == str(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_text() == "old a" and (tmp_path / "b.json").read_text() == "old b"
    assert _leftovers(tmp_path) == []


def test_a_torn_journal_line_loses_only_its_row(tmp_path):
    journal = Journal(tmp_path / "cpu.run1.jsonl", "config", {})
    journal.append([(f"k{i}", {"row_id": f"r{i}", "question": "caf\u00e9"}) for i in range(3)])
    data = journal.path.read_bytes()
    journal.path.write_bytes(data[:-9] + b"\xc3")  # cut inside the last line, mid-character
    assert sorted(read_journals(tmp_path)) == ["k0", "k1"]


def test_a_journal_that_cannot_be_written_is_a_harness_error_naming_it(tmp_path):
    from laya_robustness.run.errors import HarnessError

    (tmp_path / "journal").write_text("a file where the folder should be")
    with pytest.raises(HarnessError, match=f"cannot append to the scoring journal {tmp_path / 'journal'}/cpu.jsonl"):
        Journal(tmp_path / "journal" / "cpu.jsonl", "config", {}).append([("k", {"row_id": "r"})])


def test_a_torn_journal_line_is_rescored_alone_and_the_reports_share_the_umask_mode(gate):
    """kill -9 can cut the journal's last line: --resume scores that row again, and only it; the predictions
    equal the uninterrupted run's. Every report file gets 0666 less the umask (here 027: 0640)."""
    env = {**os.environ, "LAYA_COUNT_FILE": str(gate.path / "clean.count")}
    clean = subprocess.run(gate_command(gate, "--report-dir", "clean", "--journal", "journal"), cwd=gate.path,
                           env=env, capture_output=True, preexec_fn=lambda: os.umask(0o027))
    assert clean.returncode == 0, clean.stdout.decode()[-3000:]
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (gate.path / "clean").iterdir()}
    assert set(modes) >= set(REPORTS) and set(modes.values()) == {0o640}, modes
    (torn,) = (gate.path / "journal").glob("*.jsonl")
    lines = torn.read_bytes().splitlines(keepends=True)
    torn.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])

    env["LAYA_COUNT_FILE"] = str(gate.path / "resumed.count")
    resumed = subprocess.run(gate_command(gate, "--report-dir", "resumed", "--journal", "journal", "--resume"),
                             cwd=gate.path, env=env, capture_output=True)
    assert resumed.returncode == 0, resumed.stdout.decode()[-3000:]
    assert scored_rows(gate.path / "resumed.count") == 1
    appended = [p for p in (gate.path / "journal").glob("*.jsonl") if p != torn]
    assert len(appended) == 1 and len(appended[0].read_text().splitlines()) == 1  # its own file, after no torn line
    for name in ("predictions.jsonl.gz", "summary.json"):
        assert (gate.path / "clean" / name).read_bytes() == (gate.path / "resumed" / name).read_bytes(), name


@pytest.fixture
def small_fs(tmp_path):
    """A real 8 MiB tmpfs (root only, where the machine allows mounts); skips saying why otherwise."""
    folder = tmp_path / "small"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root; the injected ENOSPC test covers a full disk")
    tried = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True,
                           text=True)
    if tried.returncode != 0:
        pytest.skip(f"this machine does not allow a tmpfs mount ({tried.stderr.strip() or tried.returncode}); the "
                    "injected ENOSPC test covers a full disk")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder, leave: int) -> pathlib.Path:
    """A file taking all the free space of ``folder``'s file system but ``leave`` bytes."""
    st = os.statvfs(folder)
    filler = folder / "filler"
    filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return filler


def test_a_full_disk_and_a_read_only_folder_on_a_real_file_system(gate, small_fs):
    reports = small_fs / "reports"
    env = {**os.environ, "LAYA_COUNT_FILE": str(gate.path / "first.count")}
    args = ("--report-dir", str(reports), "--batch-size", "2")
    first = subprocess.run(gate_command(gate, *args), cwd=gate.path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout[-3000:]
    good = _files(reports)

    filler = _fill(small_fs, leave=40_000)  # room for the lock and some of the journal, not for the reports
    env["LAYA_COUNT_FILE"] = str(gate.path / "full.count")
    full = subprocess.run(gate_command(gate, *args), cwd=gate.path, env=env, capture_output=True, text=True)
    out = " ".join((full.stdout + full.stderr).split())
    assert full.returncode == 3, out[-3000:]
    assert f"cannot append to the scoring journal {reports / 'journal'}/" in out and "No space left on device" in out
    assert _files(reports) == good and _leftovers(reports) == []

    filler.unlink()
    env["LAYA_COUNT_FILE"] = str(gate.path / "resumed.count")
    resumed = subprocess.run(gate_command(gate, *args, "--resume"), cwd=gate.path, env=env, capture_output=True,
                             text=True)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert 0 < scored_rows(gate.path / "resumed.count") < scored_rows(gate.path / "first.count")
    assert _files(reports) == good  # the same run, finished: the same bytes

    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    read_only = subprocess.run(gate_command(gate, *args), cwd=gate.path, env=env, capture_output=True, text=True)
    assert read_only.returncode == 4, read_only.stdout[-3000:]
    assert f"--report-dir: cannot write in {reports}" in read_only.stderr
    assert "Read-only file system" in read_only.stderr
    assert _files(reports) == good


def test_a_report_folder_without_write_permission_is_a_usage_error_naming_it(gate):
    if os.geteuid() == 0:
        pytest.skip("root writes into a folder without write permission: the read-only file system case covers it")
    assert run(gate, "--families", "option_order").ret == 0
    reports = gate.path / "reports"
    good = _files(reports)
    reports.chmod(0o555)
    try:
        result = run(gate, "--families", "option_order", subprocess=True)
    finally:
        reports.chmod(0o755)
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*--report-dir: cannot write in {reports}*Permission denied*"])
    assert _files(reports) == good


def test_an_injected_full_disk_ends_with_exit_3_naming_the_files_and_keeps_the_last_report(gate, monkeypatch):
    """Where no small file system can be mounted: ENOSPC from the journal's writes after a few chunks and from
    the reports' flush to disk, in the process itself."""
    assert run(gate, "--families", "option_order").ret == 0
    reports = gate.path / "reports"
    good = _files(reports)
    real_open, appends = pathlib.Path.open, []

    class FullDisk:
        def __init__(self, fh):
            self.fh = fh

        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    def open_on_a_full_disk(self, mode="r", *args, **kwargs):
        fh = real_open(self, mode, *args, **kwargs)
        if mode == "a" and self.parent.name == "journal":
            appends.append(self)
            return FullDisk(fh) if len(appends) > 2 else fh
        return fh

    def fsync_on_a_full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "open", open_on_a_full_disk)
    monkeypatch.setattr(os, "fsync", fsync_on_a_full_disk)
    result = run(gate, "--families", "option_order")
    monkeypatch.undo()
    assert result.ret == 3
    out = " ".join(result.stdout.str().split())
    assert f"cannot append to the scoring journal {appends[-1]}: No space left on device" in out
    assert f"cannot write the reports: [Errno 28] No space left on device: '{reports}/" in out
    assert _files(reports) == good and _leftovers(reports) == []
    assert json.loads((reports / "summary.json").read_text())["meta"]["complete"] is True


def test_fixtures_gguf_on_a_full_disk_exits_3_and_leaves_the_files_there_were(small_fs):
    """``fixtures gguf`` converts beside the final names and renames: a disk that fills up mid-way leaves the
    previous model.gguf and mmproj.gguf as they were, and no staging folder."""
    import sys

    from laya_robustness.recipes.gguf import FILES, default_source

    if not (default_source() / "convert_hf_to_gguf.py").is_file():
        pytest.skip(f"llama.cpp's converter is not unpacked at {default_source()}: `bash scripts/build_llama_server.sh`"
                    " unpacks it")
    for name in FILES:
        (small_fs / name).write_bytes(b"the previous " + name.encode())
    _fill(small_fs, leave=1 << 20)  # the two files need about 2.5 MB
    done = subprocess.run([sys.executable, "-m", "laya_robustness", "fixtures", "gguf", "--out", str(small_fs)],
                          cwd=pathlib.Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "llama.cpp's converter failed" in done.stderr and done.stderr.rstrip().endswith("keeps the files it had)")
    for name in FILES:
        assert (small_fs / name).read_bytes() == b"the previous " + name.encode()
    assert not [p.name for p in small_fs.iterdir() if p.name.startswith(".gguf-")]


def test_fixtures_rows_on_a_full_disk_exits_3_and_leaves_the_folder_there_was(small_fs):
    """A fixture folder is written whole beside its final name and swapped in (run.files.staged_folder): a disk
    that fills up mid-way leaves the previous folder as it was, and no staging folder."""
    import sys

    rows = small_fs / "rows"
    rows.mkdir()
    (rows / "colour_choice.jsonl").write_text("the previous manifest\n")
    _fill(small_fs, leave=200_000)  # a few dozen rows' images, not 500 per set
    done = subprocess.run([sys.executable, "-m", "laya_robustness", "fixtures", "rows", "--out", str(rows),
                           "--rows-per-set", "500"], cwd=pathlib.Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "No space left on device" in done.stderr
    assert [p.name for p in rows.iterdir()] == ["colour_choice.jsonl"]
    assert (rows / "colour_choice.jsonl").read_text() == "the previous manifest\n"
    assert [p.name for p in small_fs.iterdir() if p.name.startswith(".rows.")] == []


def test_a_staged_folder_takes_the_place_of_the_previous_one_only_when_whole(tmp_path):
    from laya_robustness.run.files import staged_folder

    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    with pytest.raises(RuntimeError):
        with staged_folder(out) as stage:
            (stage / "new.txt").write_text("half")
            raise RuntimeError("broke half-way")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (out / "old.txt").read_text() == "old"
    with staged_folder(out) as stage:
        (stage / "new.txt").write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and [p.name for p in out.iterdir()] == ["new.txt"]
    made = tmp_path / "made-by-mkdir"
    made.mkdir()
    assert stat.S_IMODE(out.stat().st_mode) == stat.S_IMODE(made.stat().st_mode)  # the user's mode, not mkdtemp's 0700

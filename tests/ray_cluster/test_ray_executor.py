"""--executor ray against a real Ray cluster: a ``ray start --head`` process on 127.0.0.1 that every test connects to
by address (the multi-node path in miniature), started once for the module and stopped at its end."""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from laya_robustness.recipes.fixture_rows import generate_rows, write_manifest  # noqa: E402
from laya_robustness.report.wrapping import unwrap  # noqa: E402
from laya_robustness.run.errors import HarnessError  # noqa: E402
from laya_robustness.run.executors.ray_cluster import Cluster  # noqa: E402
from laya_robustness.run.executors.ray_pool import RayActorPool  # noqa: E402

from helpers.fakes import slow_scoring  # noqa: E402
from helpers.gate_project import copy_gate_tests, install_plugin_package  # noqa: E402
from helpers.limits import PASSING_LIMITS  # noqa: E402
from helpers.paths import ROOT, TESTS  # noqa: E402
from helpers.records import read_records  # noqa: E402
from helpers.weights import tensors_digest  # noqa: E402

pytest_plugins = ["pytester"]
#: What `ray job submit --runtime-env-json` sets: the job's runtime env, which its actors start with.
JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The other trained tiny SmolVLM: the head's working folder holds it as ``mymodel`` (see ``ray_head``).
OTHER_MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm-seed2"


def start_head(temp: Path) -> tuple[subprocess.Popen, str]:
    """`ray start --head --block` of a one-node cluster (2 CPUs) in ``temp`` (short: Ray's socket paths inside it
    must stay under 108 characters), once it says it started: (the process, leading its own process group; the
    address)."""
    port = _free_port()
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false", "--temp-dir", str(temp),
           "--disable-usage-stats"]
    with (temp / "head.log").open("w") as log:
        head = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=temp)
    deadline = time.monotonic() + 90
    while "Ray runtime started" not in (temp / "head.log").read_text():
        assert head.poll() is None and time.monotonic() < deadline, (temp / "head.log").read_text()
        time.sleep(0.2)
    return head, f"127.0.0.1:{port}"


def stop_head(head: subprocess.Popen) -> None:
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()


@pytest.fixture(scope="module")
def ray_head():
    """The address of a one-node cluster started with `ray start --head --block`, stopped on SIGTERM. It is started
    in a folder that holds another checkpoint as ``mymodel``: where an actor resolves a relative path, it finds
    that."""
    temp = Path(tempfile.mkdtemp(prefix="ray-"))
    shutil.copytree(OTHER_MODEL, temp / "mymodel")
    head, address = start_head(temp)
    yield address
    stop_head(head)
    shutil.rmtree(temp, ignore_errors=True)


def job_env(**env) -> str:
    """The runtime env of a gate run's Ray job: the fakes importable on the actors, and ``env``."""
    return json.dumps({"runtime_env": {"env_vars": {"PYTHONPATH": str(TESTS), **env}}})


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the gate with two sets of 24 rows and the fake scorer (as the plugin tests' ``gate``), shared by
    the module's gate runs, each of which reports to its own folder."""
    path = tmp_path_factory.mktemp("gate")
    copy_gate_tests(path)
    for name in ("colour_choice", "exists_yesno"):
        write_manifest(generate_rows(name, 24, seed=5), path / "rows")
    (path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers -p no:cacheprovider\nlaya_scorer = "
                                     "helpers.fakes:oracle\nlaya_data = rows\nlaya_model = fake-model\n")
    (path / "limits.toml").write_text(PASSING_LIMITS)
    return path


#: The fake-scorer runs: one family, batches of 2 rows (so a family and set is several chunks).
FAKE_RUN = ("--families", "option_order", "--batch-size", "2")


def start_gate(project: Path, *args, job: str | None = None, path: tuple[Path, ...] = ()) -> subprocess.Popen:
    """``pytest robustness_tests`` in ``project`` (no snapshot, benchmark, invariance or gpu tests) as a process;
    ``job``: the Ray job's runtime env it runs under (``job_env``); ``path``: folders it imports from besides the
    fakes'."""
    cmd = [sys.executable, "-m", "pytest", "robustness_tests", "--thresholds", "limits.toml",
           "-k", "not (snapshot or benchmark or invariance or gpu)", *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (TESTS, *path)))}
    env.pop(JOB_CONFIG, None)
    if job is not None:
        env[JOB_CONFIG] = job
    return subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def gate_run(project: Path, *args, job: str | None = None, path: tuple[Path, ...] = ()) -> tuple[int, str]:
    """(exit status, output) of a gate run in ``project`` (see ``start_gate``)."""
    process = start_gate(project, *args, job=job, path=path)
    out, _ = process.communicate(timeout=600)
    return process.returncode, out


@pytest.fixture(scope="module")
def local(project) -> Path:
    """The reports of the fake-scorer run scored in the pytest process (-n 0)."""
    status, out = gate_run(project, *FAKE_RUN, "--report-dir", "local", "-n", "0")
    assert status == 0, out
    return project / "local"


def _blocks(path: Path) -> dict:
    """summary.json without its meta (where and when it ran)."""
    summary = json.loads(path.read_text())
    return {k: v for k, v in summary.items() if k != "meta"}


def _same_reports(folder: Path, other: Path) -> None:
    assert (folder / "predictions.jsonl.gz").read_bytes() == (other / "predictions.jsonl.gz").read_bytes()
    assert _blocks(folder / "summary.json") == _blocks(other / "summary.json")
    assert json.loads((folder / "checks.json").read_text()) == json.loads((other / "checks.json").read_text())


def test_a_ray_run_reports_what_a_local_run_does(project, local, ray_head):
    status, out = gate_run(project, *FAKE_RUN, "-v", "--report-dir", "ray", "--executor", "ray", "--ray-address",
                           ray_head, job=job_env())
    assert status == 0, out
    for line in ("robustness gate (cpu)", "orig ", "option_order "):  # the tables of -v
        assert line in out
    _same_reports(project / "ray", local)
    assert (project / "ray" / "report.html").stat().st_size > 0
    executor = json.loads((project / "ray" / "summary.json").read_text())["meta"]["executor"]
    assert executor["name"] == "ray" and executor["address"] == ray_head and executor["actors"] == 2
    assert sum(executor["nodes"].values()) == 2 and executor["replaced_actors"] == 0
    assert executor["keeps_freed_memory"] is True  # --keep-freed-memory yes, the default, holds on the actors too
    assert "executor" not in json.loads((local / "summary.json").read_text())["meta"]


def test_the_embedded_model_on_ray_scores_and_checks_what_it_does_locally(project, ray_head):
    """The real checkpoint (fp32, eager attention on the CPU): predictions, summary blocks, checks and the
    invariance conditions (scored on the pool's first actor) equal a local run's."""
    args = ("--scorer", "hf", "--model", str(ROOT / "laya_fixtures" / "tiny-smolvlm"), "--data",
            str(ROOT / "laya_fixtures" / "rows"), "--thresholds", str(ROOT / "thresholds.toml"), "--rows-per-set", "3",
            "--families", "text", "--invariance-rows", "2", "--dual-model", "none",
            "-k", "not (snapshot or benchmark or gpu)")
    status, out = gate_run(project, *args, "--report-dir", "embedded-local")
    assert status in (0, 1), out
    remote_status, out = gate_run(project, *args, "--report-dir", "embedded-ray", "--executor", "ray",
                                  "--ray-address", ray_head, job=job_env())
    assert remote_status == status, out
    _same_reports(project / "embedded-ray", project / "embedded-local")
    conditions = [json.loads((project / d / "invariance.json").read_text())["conditions"]
                  for d in ("embedded-ray", "embedded-local")]
    assert conditions[0] == conditions[1] and "batched" in conditions[0]


PIXEL_FAMILIES = ("rotation", "scale_pad", "shift", "overlay")


def test_pixel_families_are_built_on_the_actors_and_score_as_locally(project, ray_head, tmp_path, monkeypatch):
    """Pixel families on Ray: the front end builds none of their variants (the actors build them where they score
    them, from the source images' bytes), and a scorer that reads every pixel gives the local run's predictions
    and summary byte for byte."""
    run = ("--scorer", "helpers.fakes:pixels", "--families", ",".join(PIXEL_FAMILIES), "--batch-size", "2",
           "-p", "helpers.count_builds")
    monkeypatch.setenv("LAYA_BUILDS_FILE", str(tmp_path / "local.json"))
    status, out = gate_run(project, *run, "--report-dir", "pixels-local")
    assert status == 0, out
    monkeypatch.setenv("LAYA_BUILDS_FILE", str(tmp_path / "ray.json"))
    status, out = gate_run(project, *run, "--report-dir", "pixels-ray", "--executor", "ray", "--ray-address",
                           ray_head, job=job_env())
    assert status == 0, out
    local, remote = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("local", "ray"))
    assert {f: local.get(f) for f in PIXEL_FAMILIES} == {f: 48 for f in PIXEL_FAMILIES}  # 2 sets of 24 rows
    assert not any(remote.get(f) for f in PIXEL_FAMILIES), remote
    _same_reports(project / "pixels-ray", project / "pixels-local")
    records = read_records(project / "pixels-ray")
    assert {r["family"] for r in records} >= set(PIXEL_FAMILIES)


def test_each_variant_image_is_built_once_on_the_actor_that_builds_it_and_taken_from_there(project, ray_head,
                                                                                           tmp_path, monkeypatch):
    """Chunks of 256 rows leave room to keep every variant image of this run: each is built once (counted on the
    actors, in summary.json's executor meta) and kept in Ray's object store, from which the actor that scores it
    takes it where its own store does not hold it: none is built again. The predictions are the local run's."""
    run = ("--scorer", "helpers.fakes:pixels", "--families", ",".join(PIXEL_FAMILIES), "--batch-size", "16")
    status, out = gate_run(project, *run, "--report-dir", "once-local")
    assert status == 0, out
    status, out = gate_run(project, *run, "--report-dir", "once-ray", "--executor", "ray", "--ray-address", ray_head,
                           job=job_env())
    assert status == 0, out
    _same_reports(project / "once-ray", project / "once-local")
    counts = json.loads((project / "once-ray" / "summary.json").read_text())["meta"]["executor"]["variant_images"]
    records = read_records(project / "once-ray")
    variant_images = sum(r["n_images"] for r in records if r["family"] in PIXEL_FAMILIES)
    assert counts["built"] == counts["kept"] == variant_images and counts["built_again"] == 0, counts


def test_the_cells_are_scored_as_one_stream_each_test_waiting_for_its_own(project, local, ray_head, tmp_path):
    """Every orig cell is one chunk of 24 rows: scored cell after cell, the second actor would idle while the first
    scores the first cell. As one stream, the next cells' chunks start before the first cell's last one ends, the
    chunks of every cell are spread over both actors, and the records are the local run's."""
    calls = tmp_path / "calls.txt"
    status, out = gate_run(project, *FAKE_RUN, "--scorer", "helpers.fakes:slow", "--report-dir", "streamed",
                           "--executor", "ray", "--ray-address", ray_head,
                           job=job_env(LAYA_SLOW_PER_ROW="0.02", LAYA_CALLS_FILE=str(calls)))
    assert status == 0, out
    assert (project / "streamed" / "predictions.jsonl.gz").read_bytes() == (local / "predictions.jsonl.gz").read_bytes()
    by_cell: dict[str, list[tuple[int, float, float]]] = {}
    for pid, start, end, cells in map(str.split, calls.read_text().splitlines()):
        assert "," not in cells, cells  # a chunk holds one cell's rows: the local run's chunks
        by_cell.setdefault(cells, []).append((int(pid), float(start), float(end)))
    first = by_cell.pop("orig/colour_choice")  # the first test's cell; the stream orders the others' chunks itself
    assert min(start for calls in by_cell.values() for _, start, _ in calls) < max(end for _, _, end in first), by_cell
    assert len({pid for calls in [*by_cell.values(), first] for pid, _, _ in calls}) == 2


def test_only_the_cells_of_the_selected_tests_are_scored(project, local, ray_head, tmp_path):
    """-k narrows the stream as it narrows the tests: only the orig and option_order rows of colour_choice are
    scored (counted on the actors), with the local run's records."""
    counts = tmp_path / "rows.count"
    status, out = gate_run(project, *FAKE_RUN, "--scorer", "helpers.fakes:slow", "--report-dir", "narrowed",
                           "--executor", "ray", "--ray-address", ray_head,
                           "-k", "option_order and colour_choice and not gpu", job=job_env(LAYA_COUNT_FILE=str(counts)))
    assert status == 0, out
    asked = [r for r in read_records(local)
             if r["dataset"] == "colour_choice" and r["family"] in ("orig", "option_order")]
    assert sum(int(n) for n in counts.read_text().split()) == len(asked) > 24
    assert read_records(project / "narrowed") == asked


@pytest.mark.parametrize("raised", ["IndexError", "Unpicklable"])
def test_a_cell_whose_scorer_raises_fails_its_own_tests_and_the_stream_goes_on(project, local, ray_head, raised):
    """option_order's rows crash the scorer while the orig cells are waited for: the orig tests pass with the
    local run's records, each option_order test fails as a harness error naming its own cell and the scorer's own
    exception (also one Ray cannot send back whole: it read 'UnserializableException: Failed to deserialize'),
    and the run ends 3."""
    crash = {"LAYA_CRASH_FAMILY": "option_order", **({"LAYA_CRASH_UNPICKLABLE": "1"} if raised != "IndexError" else {})}
    status, out = gate_run(project, *FAKE_RUN, "--scorer", "helpers.fakes:slow",
                           "--report-dir", f"one-cell-broken-{raised}", "--executor", "ray", "--ray-address", ray_head,
                           job=job_env(**crash))
    assert status == 3, out
    assert "2 failed, 2 passed" in out and "FAILED robustness_tests/test_families.py::test_orig" not in out, out
    assert "UnserializableException" not in out
    said = "\n".join(unwrap(out.splitlines()))  # the terminal's lines, wrapped to its width, joined back
    for dataset in ("colour_choice", "exists_yesno"):
        assert f"FAILED robustness_tests/test_families.py::test_option_order[{dataset}-cpu]" in out
        assert re.search(rf"HARNESS ERROR .*scoring option_order/{dataset} on cpu .*{raised}: tuple index out of "
                         rf"range \(a option_order row\)", said), out
    orig = [r for r in read_records(local) if r["family"] == "orig"]
    assert read_records(project / f"one-cell-broken-{raised}") == orig


def _gate_with_one_row_marked(folder: Path, key: str, value) -> tuple[Path, list[dict]]:
    """A gate project in ``folder`` over 8 colour_choice rows (the fake oracle scorer), the fourth row's
    ``meta[key]`` set to ``value``: the manifest and its rows."""
    copy_gate_tests(folder)
    manifest = write_manifest(generate_rows("colour_choice", 8, seed=5), folder / "rows")
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    rows[3]["meta"][key] = value
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\nlaya_scorer = helpers.fakes:oracle\n"
                                       "laya_data = rows\nlaya_model = fake-model\n")
    return manifest, rows


STRICT_GRAY = """
from laya_robustness.families import Family, declare


def build(rows, seed):
    for row in rows:
        if row.meta.get("shade") == "none":
            raise ValueError(f"{row.row_id}: strict_gray has no grey for shade 'none'")
    return [row.derive("strict_gray", "gray", images=tuple(i.convert("L").convert("RGB") for i in row.images))
            for row in rows if row.images]


declare(Family(name="strict_gray", build=build, row_wise=True, summary="the image in grayscale, or an error",
               variants=("gray",), title="strict gray", short="gray"))
"""


def test_a_row_its_family_cannot_build_fails_as_it_does_locally_not_as_a_harness_error(ray_head, tmp_path):
    """A family (an installed plug-in, built where its rows are scored) whose builder refuses one row: on Ray the
    builder raises on the actor that builds the row, and the run reports it as a local run does (its test fails
    with the builder's own error, exit 1), not as a crash of the harness (exit 3)."""
    site = tmp_path / "site"
    site.mkdir()
    install_plugin_package(site, "strict_gray_plugin", STRICT_GRAY, family="strict_gray")
    _, rows = _gate_with_one_row_marked(tmp_path, "shade", "none")
    (tmp_path / "limits.toml").write_text(PASSING_LIMITS + "[families.strict_gray]\nmax_flip = 0.9\n")
    path = f"{TESTS}{os.pathsep}{site}"
    runs = {name: gate_run(tmp_path, "--families", "strict_gray", "--report-dir", name, *args, path=(site,),
                           job=job_env(PYTHONPATH=path))
            for name, args in [("local", ("-n", "0")), ("ray", ("--executor", "ray", "--ray-address", ray_head))]}
    for status, out in runs.values():
        assert status == 1, out
        assert "FAILED robustness_tests/test_families.py::test_strict_gray[colour_choice-cpu]" in out, out
        assert "1 failed, 1 passed" in out and "HARNESS ERROR" not in out, out
        assert f"ValueError: {rows[3]['row_id']}: strict_gray has no grey for shade 'none'" in out, out


def test_a_wrong_meta_value_a_family_reads_is_an_input_error_before_anything_is_scored(ray_head, tmp_path):
    """A row whose rotation class is no boolean is refused when the rows are read, naming the file, line and field
    (exit 4), on Ray as locally, and no row is scored."""
    manifest, _ = _gate_with_one_row_marked(tmp_path, "rotation_variant", "yes")
    (tmp_path / "limits.toml").write_text(PASSING_LIMITS)
    for name, args in [("local", ("-n", "0")), ("ray", ("--executor", "ray", "--ray-address", ray_head))]:
        status, out = gate_run(tmp_path, "--families", "rotation", "--report-dir", name, *args, job=job_env())
        assert status == 4, out
        assert f"--data: {manifest}:4: field 'meta.rotation_variant': expected true or false, got 'yes'" in out, out
        assert not (tmp_path / name / "predictions.jsonl.gz").exists()


def _journaled(journal: Path) -> list[str]:
    """The keys of the complete lines of the run's CPU journal file in ``journal`` (none while there is none)."""
    files = sorted(journal.glob("cpu.*.jsonl"))
    if not files:
        return []
    assert len(files) == 1, files  # one process writes it: the front end
    keys = []
    for line in files[0].read_text().splitlines():
        try:
            keys.append(json.loads(line)["key"])
        except json.JSONDecodeError:
            pass  # torn by the kill
    return keys


def _orig_cells_journaled(journal: Path, rows: int, datasets: int) -> bool:
    """Whether the journal holds ``rows`` orig records of each of ``datasets`` datasets (their complete orig cells)."""
    files = sorted(journal.glob("cpu.*.jsonl"))
    counts: dict[str, int] = {}
    for line in files[0].read_text().splitlines() if files else ():
        try:
            record = json.loads(line)["record"]
        except json.JSONDecodeError:
            continue  # a line being written
        if record["family"] == "orig":
            counts[record["dataset"]] = counts.get(record["dataset"], 0) + 1
    return sum(n >= rows for n in counts.values()) >= datasets


def _wait_for(condition, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_actor_killed_mid_run_loses_no_record_and_duplicates_none(project, local, ray_head, tmp_path):
    pids, journal = tmp_path / "pids", tmp_path / "journal"
    pids.mkdir()
    process = start_gate(project, *FAKE_RUN, "--scorer", "helpers.fakes:slow", "--report-dir", "killed-actor",
                         "--journal", str(journal), "--executor", "ray", "--ray-address", ray_head, "--baseline",
                         str(local / "predictions.jsonl.gz"),
                         job=job_env(LAYA_SLOW_PER_ROW="0.02", LAYA_PID_DIR=str(pids)))
    _wait_for(lambda: len(list(pids.iterdir())) == 2 and _journaled(journal), process)
    os.kill(int(min(p.name for p in pids.iterdir())), signal.SIGKILL)
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    assert len(list(pids.iterdir())) == 3  # the replacement loaded the scorer once more
    assert (project / "killed-actor" / "predictions.jsonl.gz").read_bytes() == \
        (local / "predictions.jsonl.gz").read_bytes()
    keys = _journaled(journal)
    assert sum(len(f.read_text().splitlines()) for f in journal.glob("cpu.*.jsonl")) == len(keys)
    assert len(keys) == len(set(keys)) == len(read_records(local))
    meta = json.loads((project / "killed-actor" / "summary.json").read_text())["meta"]
    assert meta["executor"]["replaced_actors"] == 1 and meta["complete"] is True
    assert "test_baseline.py" in out and " failed" not in out  # the --baseline comparison works unchanged


def test_an_actor_killed_while_it_loads_is_replaced_and_the_run_gives_the_local_records(project, local, ray_head,
                                                                                        tmp_path):
    """An actor lost while it loads the scorer (before any row) is replaced as one lost while scoring is: the run
    ends as the local run does (it used to end with exit 3)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    process = start_gate(project, *FAKE_RUN, "--scorer", "helpers.fakes:slow", "--report-dir", "killed-loading",
                         "--executor", "ray", "--ray-address", ray_head, "--baseline",
                         str(local / "predictions.jsonl.gz"),
                         job=job_env(LAYA_PID_DIR=str(pids), LAYA_LOAD_S="3"))
    _wait_for(lambda: len(list(pids.iterdir())) >= 1, process)
    os.kill(int(min(p.name for p in pids.iterdir())), signal.SIGKILL)  # while it sleeps in its load
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    assert (project / "killed-loading" / "predictions.jsonl.gz").read_bytes() == \
        (local / "predictions.jsonl.gz").read_bytes()
    meta = json.loads((project / "killed-loading" / "summary.json").read_text())["meta"]
    assert meta["executor"]["replaced_actors"] == 1 and meta["complete"] is True


def test_a_killed_controller_resumes_with_resume(project, local, ray_head, tmp_path):
    journal, counts = tmp_path / "journal", tmp_path / "rows.count"
    args = (*FAKE_RUN, "--scorer", "helpers.fakes:slow", "--report-dir", "resumed", "--journal", str(journal),
            "--executor", "ray", "--ray-address", ray_head)
    first = start_gate(project, *args, job=job_env(LAYA_SLOW_PER_ROW="0.02"))
    _wait_for(lambda: _journaled(journal), first)
    first.kill()
    first.communicate()
    journaled = len(set(_journaled(journal)))
    status, out = gate_run(project, *args, "--resume", job=job_env(LAYA_COUNT_FILE=str(counts)))
    assert status == 0, out
    total = len(read_records(local))
    assert 0 < journaled < total
    assert sum(int(n) for n in counts.read_text().split()) == total - journaled  # only the rest was scored
    assert (project / "resumed" / "predictions.jsonl.gz").read_bytes() == (local / "predictions.jsonl.gz").read_bytes()


def _weights(report: Path) -> dict:
    return json.loads((report / "summary.json").read_text())["meta"]["model"]["weights_sha256"]


#: A small real-model run: the embedded rows, one text family, no invariance (the models are what is checked).
EMBEDDED_RUN = ("--scorer", "hf", "--data", str(ROOT / "laya_fixtures" / "rows"), "--thresholds",
                str(ROOT / "thresholds.toml"), "--rows-per-set", "2", "--families", "text", "--dual-model", "none",
                "-k", "not (snapshot or benchmark or gpu or invariance)")


def test_a_relative_model_is_the_one_the_front_end_finds_not_one_in_the_heads_folder(project, ray_head, tmp_path):
    """``--model mymodel`` given in a folder that holds it, under a rootdir that does not: the actors load that
    directory, not the ``mymodel`` of the folder the head was started in (another model)."""
    here = tmp_path / "here"
    shutil.copytree(ROOT / "laya_fixtures" / "tiny-smolvlm", here / "mymodel")
    cmd = [sys.executable, "-m", "pytest", str(project / "robustness_tests"), "-c", str(project / "pytest.ini"),
           "--model", "mymodel", *EMBEDDED_RUN, "--report-dir", str(tmp_path / "report"), "--executor", "ray",
           "--ray-address", ray_head]
    env = {**os.environ, "PYTHONPATH": str(TESTS), JOB_CONFIG: job_env()}
    done = subprocess.run(cmd, cwd=here, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert _weights(tmp_path / "report") == {"tensors": tensors_digest(here / "mymodel")}


def _hub_cache(folder: Path, repo: str, checkpoint: Path) -> Path:
    """A Hugging Face hub cache in ``folder`` holding ``checkpoint`` as ``repo``'s main revision."""
    revision = hashlib.sha1(str(checkpoint).encode()).hexdigest()
    entry = folder / f"models--{repo.replace('/', '--')}"
    shutil.copytree(checkpoint, entry / "snapshots" / revision)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text(revision)
    return folder


def test_actors_that_load_other_weights_than_the_front_end_found_stop_the_run_naming_both(project, ray_head,
                                                                                           tmp_path):
    """A hub id that this machine's cache and the actors' cache hold at different weights (nodes with caches of
    different revisions): exit 3 before any row is scored, naming both weights' hashes and the node."""
    repo = "laya-tests/tiny-smolvlm"
    mine = _hub_cache(tmp_path / "front", repo, ROOT / "laya_fixtures" / "tiny-smolvlm")
    theirs = _hub_cache(tmp_path / "actors", repo, OTHER_MODEL)
    cmd = [sys.executable, "-m", "pytest", "robustness_tests", "--model", repo, *EMBEDDED_RUN, "--report-dir",
           "other-weights", "--executor", "ray", "--ray-address", ray_head]
    env = {**os.environ, "PYTHONPATH": str(TESTS), "HF_HUB_CACHE": str(mine), "HF_HUB_OFFLINE": "1",
           JOB_CONFIG: job_env(HF_HUB_CACHE=str(theirs), HF_HUB_OFFLINE="1")}
    done = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 3, out
    short = {p.name: tensors_digest(p)[:12] for p in (ROOT / "laya_fixtures" / "tiny-smolvlm", OTHER_MODEL)}
    assert re.search(rf"the actor on node [\d.]+ loaded rows model '{repo}' with weights tensors "
                     rf"{short[OTHER_MODEL.name]}, but the model this run resolved has weights tensors "
                     rf"{short['tiny-smolvlm']}", out), out
    assert "1 failed" in out  # the run stopped at its first test: nothing can be scored on those weights
    assert not (project / "other-weights" / "predictions.jsonl.gz").exists()


def test_an_unreachable_cluster_is_exit_3_before_any_test_naming_the_address(project):
    address = f"127.0.0.1:{_free_port()}"
    status, out = gate_run(project, "--report-dir", "unreachable", "--executor", "ray", "--ray-address", address)
    assert status == 3, out
    assert f"no Ray cluster answers at --ray-address {address}" in out
    assert not (project / "unreachable").exists()


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_port_that_is_no_ray_head_is_exit_3_in_seconds_naming_it(project, scheme):
    """A port that accepts connections but is no Ray head (an HTTP server here): Ray's own connect would retry
    for minutes; the run stops in seconds, exit 3, naming the address, before the report folder is touched."""
    from http.server import HTTPServer, SimpleHTTPRequestHandler
    from threading import Thread

    server = HTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    Thread(target=server.serve_forever, daemon=True).start()
    address = f"{scheme}127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        status, out = gate_run(project, "--report-dir", "not-ray", "--executor", "ray", "--ray-address", address)
        took = time.monotonic() - started
    finally:
        server.shutdown()
    assert status == 3, out
    assert f"--ray-address {address}: 127.0.0.1:{server.server_address[1]} accepts connections but is no Ray head" in out
    assert took < 30 and not (project / "not-ray").exists()


def _gcs_server(temp: Path) -> int:
    """The process id of the GCS server of the head started in ``temp`` (its command line names that folder)."""
    import psutil

    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "gcs_server" in (process.info["name"] or "") and str(temp) in cmdline:
            return process.pid
    raise AssertionError(f"no gcs_server of the head in {temp}")


def test_a_head_lost_mid_run_is_exit_3_in_seconds_with_its_journal_and_resume_finishes(project, local, tmp_path):
    """The head's GCS killed (-9) while the actors score: exit 3 naming the address within seconds (Ray itself
    ends the process with 1 after a minute), the report written as incomplete, the lock released, the journal
    kept; --resume with the local executor then gives the local run's predictions. (The head's raylet is left: the
    front end runs on the head's node here, and Ray ends a driver at once, uncatchably, when its local raylet
    dies: docs/clusters.md.)"""
    temp = Path(tempfile.mkdtemp(prefix="ray-"))
    head, address = start_head(temp)
    journal = tmp_path / "journal"
    try:
        process = start_gate(project, *FAKE_RUN, "--scorer", "helpers.fakes:slow", "--report-dir", "lost", "--journal",
                             str(journal), "--executor", "ray", "--ray-address", address,
                             job=job_env(LAYA_SLOW_PER_ROW="0.05"))
        # whole cells scored first (both datasets' 24 orig rows: the first test asks for one of them), which the
        # incomplete report is made of
        _wait_for(lambda: _orig_cells_journaled(journal, rows=24, datasets=2), process)
        os.kill(_gcs_server(temp), signal.SIGKILL)
        killed = time.monotonic()
        out, _ = process.communicate(timeout=120)
        took = time.monotonic() - killed
    finally:
        stop_head(head)
        shutil.rmtree(temp, ignore_errors=True)
    assert process.returncode == 3, out[-3000:]
    assert f"lost the Ray cluster at --ray-address {address}: its head" in out and took < 45, (took, out[-2000:])
    meta = json.loads((project / "lost" / "summary.json").read_text())["meta"]
    assert meta["complete"] is False and "lost the Ray cluster" in meta["incomplete_reason"]
    assert not (project / "lost" / ".laya-robustness.lock").exists() and _journaled(journal)
    status, out = gate_run(project, *FAKE_RUN, "--scorer", "helpers.fakes:slow", "--report-dir", "lost", "--journal",
                           str(journal), "--resume")
    assert status == 0, out[-3000:]
    assert (project / "lost" / "predictions.jsonl.gz").read_bytes() == (local / "predictions.jsonl.gz").read_bytes()


@pytest.mark.parametrize("args, words", [
    (("--executor", "ray", "-n", "2"), "--executor ray: the Ray actors spread the scoring; it cannot run with xdist"),
    (("--executor", "ray", "--ray-actors", "0"), "--ray-actors: 0 is below 1"),
    (("--executor", "ray", "--ray-address", "head"), "--ray-address: 'head' is not local, auto, host:port"),
    (("--ray-address", "10.0.0.1:6379"), "--ray-address: only --executor ray uses it"),
    (("--executor", "dask"), "--executor: 'dask' is not one of local, ray"),
])
def test_a_bad_executor_option_is_a_usage_error_naming_it(gate, args, words):
    result = gate.runpytest("robustness_tests", *args)
    assert result.ret == 4
    assert words in result.stderr.str()


def test_without_ray_the_ray_executor_says_what_to_install(gate, monkeypatch):
    monkeypatch.setattr("laya_robustness.run.executors.ray_executor.ray_installed", lambda: False)
    result = gate.runpytest("robustness_tests", "--executor", "ray")
    assert result.ret == 4
    assert "--executor ray: Ray is not installed; pip install 'laya-robustness[cluster]'" in result.stderr.str()


# -- scaling ----------------------------------------------------------------------------------------------------


@pytest.fixture
def connected(ray_head):
    ray.init(address=ray_head, runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}}, log_to_driver=False)
    yield
    ray.shutdown()


def test_a_source_image_travels_as_an_object_read_on_this_node_not_put_from_here(connected, tmp_path, monkeypatch):
    """On Ray a source image travels as one object the front end does not write (so the object-store pages it maps
    do not grow with the images): one reader actor on the front end's node reads every file, a relative path as
    the front end resolves it (not in the head's folder, where the reader runs), and the object holds the file's
    bytes. A file gone by then is the loader's error naming it, raised where the bytes are taken."""
    from laya_robustness.loaders.image_refs import ImageRef, Where
    from laya_robustness.run.pipeline.image_store import _READER, shared_bytes

    monkeypatch.chdir(tmp_path)
    contents = {"a.jpg": b"first" * 40_000, "b.jpg": b"second" * 40_000}  # over 100 KB: not inlined
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    where = Where(tmp_path / "rows.jsonl", 3)
    refs = [shared_bytes(ray, ImageRef(where, "images", 10**8, file=Path(name))) for name in contents]
    assert ray.get(refs) == list(contents.values())
    assert ray.get(_READER["actor"].files_read.remote()) == 2
    node = ray.get_runtime_context().get_node_id()
    assert [set(where_kept) for where_kept in _object_locations(refs)] == [{node}] * len(refs)
    gone = shared_bytes(ray, ImageRef(where, "images", 10**8, file=Path("gone.jpg")))
    with pytest.raises(Exception, match=r"rows\.jsonl:3: field 'images': cannot read image .*gone\.jpg"):
        ray.get(gone)


def _object_locations(refs, within_s: float = 10.0) -> list[list[str]]:
    """The node ids holding each of ``refs``, once each has one (the raylet tells the object's owner where it was
    stored after the object is made, so right after ``ray.get`` a location may not be known yet)."""
    deadline = time.monotonic() + within_s
    while True:
        nodes = [where_kept["node_ids"] for where_kept in ray.experimental.get_object_locations(refs).values()]
        if all(nodes) or time.monotonic() > deadline:
            return nodes
        time.sleep(0.1)


def _calls(shards, n_actors: int, per_row: float, calls_file) -> list[tuple[int, float, float]]:
    """Score ``shards`` on ``n_actors`` SlowScorer actors; each scoring call as (pid, start, end)."""
    pool = RayActorPool({"rows": partial(slow_scoring, per_row, str(calls_file))}, "cpu", n_actors, gpus=False,
                        label="test")
    try:
        pool.prepare("rows")
        done = sorted(index for index, _ in pool.records("rows", shards))
    finally:
        pool.close()
    assert done == list(range(len(shards)))
    return [(int(pid), float(t0), float(t1)) for pid, t0, t1, *_ in map(str.split, calls_file.read_text().splitlines())]


def test_two_actors_score_a_device_bound_model_side_by_side(connected, fixture_rows, tmp_path):
    """Every row costs 25 ms, as on a device; 8 shards of 12 rows. Both actors score shards, and their calls
    overlap in time: the shards run in parallel (how much faster that is: ``python scripts/ray_scaling.py``)."""
    rows = [r for rows in fixture_rows.values() for r in rows][:96]
    shards = [rows[i:i + 12] for i in range(0, len(rows), 12)]
    calls = _calls(shards, 2, 0.025, tmp_path / "calls.txt")
    by_actor = Counter(pid for pid, _, _ in calls)
    assert len(by_actor) == 2 and min(by_actor.values()) >= 2, by_actor
    overlapping = [(a, b) for a in calls for b in calls if a[0] < b[0] and a[1] < b[2] and b[1] < a[2]]
    assert overlapping, calls


def test_the_cluster_says_how_many_actors_it_takes(connected, ray_head):
    """By default 2 on CPUs; as many as asked up to its CPUs (GPUs); more is a harness error (exit 3) naming them,
    since the extra actors would wait for theirs forever."""
    cluster = Cluster(ray_head, owned=False)
    assert cluster.actor_count(None, gpus=False) == 2 and cluster.actor_count(1, gpus=False) == 1
    with pytest.raises(HarnessError, match=f"--ray-actors 3: the Ray cluster at {ray_head} has 2 CPUs and each"):
        cluster.actor_count(3, gpus=False)
    with pytest.raises(HarnessError, match="--ray-actors auto: the Ray cluster at .* has 0 GPUs"):
        cluster.actor_count(None, gpus=True)


def test_the_gate_scaling_script_measures_runs_that_match_the_local_one(tmp_path):
    """``scripts/ray_gate_scaling.py`` on a few photos: its own head, a local run and a one-actor run whose
    predictions it checks against the local ones, and the numbers it prints."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "ray_gate_scaling.py"), "--actors", "1", "--rows",
                          "3", "--size", "160x120", "--per-row", "0"], capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if k != JOB_CONFIG})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout)
    runs = result["runs"]["3"]
    assert result["predictions_identical_to_local"] and runs["1"]["rows"] == runs["local"]["rows"] == 33
    assert runs["1"]["front_cpu_s"] > 0 and runs["1"]["actor_rss_mib"] > 0 and runs["1"]["wall_ratio_to_first"] == 1
    assert runs["1"]["wall_s_runs"] == [runs["1"]["wall_s"]] and len(runs["local"]["wall_s_runs"]) == 1
    assert 0 < runs["1"]["actors_system_s"] < runs["1"]["actors_cpu_s"] and runs["1"]["actors_minor_faults"] > 0

"""Rows stream through the gate: what it holds decoded while it scores does not grow with the rows, and the
records, journal and reports are those of a run that keeps every image."""

import gzip
import json
import platform

import pytest

from laya_robustness.recipes.bench import write_photo_rows
from laya_robustness.run.pipeline.chunks import CHUNK_BATCHES

from helpers.gate_project import copy_gate_tests, fakes_importable
from helpers.limits import NOTHING_FAILS_LIMITS

pytest_plugins = ["pytester"]
PHOTO = (160, 120)  # 57,600 bytes decoded
CHUNK_ROWS = CHUNK_BATCHES * 2  # rows of a scoring chunk at --batch-size 2 (one score_batch call each)


@pytest.fixture
def photo_gate(pytester, monkeypatch):
    """The gate's test modules with the image-counting fake scorer, and photo rows written on demand."""
    copy_gate_tests(pytester.path)
    pytester.makeini("[pytest]\naddopts = --strict-markers -p no:cacheprovider\n"
                     "laya_scorer = helpers.fakes:image_census\nlaya_model = fake-model\n")
    (pytester.path / "limits.toml").write_text(NOTHING_FAILS_LIMITS)
    fakes_importable(monkeypatch)
    return pytester


def _run(gate, monkeypatch, n_rows: int, cache_mb: int, name: str, *extra: str) -> dict:
    """The image family on ``n_rows`` photo rows; the census of decoded images and the run's files."""
    data, reports = gate.path / f"data{n_rows}", gate.path / name
    if not data.exists():
        write_photo_rows(data, n_rows, size=PHOTO)
    census = gate.path / f"{name}.census.json"
    monkeypatch.setenv("LAYA_CENSUS_FILE", str(census))
    result = gate.runpytest_subprocess(
        "robustness_tests/test_families.py", "--import-mode=importlib", "--thresholds", "limits.toml",
        "--data", str(data), "--families", "image", "--batch-size", "2", "--image-cache-mb", str(cache_mb),
        "--report-dir", str(reports), "-k", "test_image or test_orig", "-p", "no:randomly", *extra)
    assert result.ret == 0, result.stdout.str()[-3000:]
    with gzip.open(reports / "predictions.jsonl.gz", "rt") as fh:
        predictions = fh.read()
    journal = "".join(p.read_text() for p in sorted((reports / "journal").glob("*.jsonl")))
    return {"census": json.loads(census.read_text()), "predictions": predictions, "journal": journal,
            "summary": json.loads((reports / "summary.json").read_text())}


def test_what_is_held_decoded_does_not_grow_with_the_rows_and_letting_go_changes_no_record(photo_gate, monkeypatch):
    """Every decoded image alive in the process is counted at every batch: with four times the rows (each with
    its own photo, eight image variants each) the most held stays the same, within the image store's bound
    (1 MiB), a chunk and the rows being built; holding a family's variants of a whole dataset at once would
    hold four times as many. The images let go are rebuilt when their chunk is scored: the predictions, the
    journal (keys included) and the summary are those of a run whose store keeps everything. Each chunk is made
    when it is asked for (``LAYA_PREFETCH_CHUNKS=0``): a chunk made ahead, one more by design, is held at a batch's
    census or not yet, as the threads' timing has it, which moves the census by a chunk from run to run."""
    monkeypatch.setenv("LAYA_PREFETCH_CHUNKS", "0")
    small = _run(photo_gate, monkeypatch, 12, cache_mb=1, name="small")
    large = _run(photo_gate, monkeypatch, 48, cache_mb=1, name="large")
    print("census", small["census"], large["census"])
    per_image = PHOTO[0] * PHOTO[1] * 3
    chunks = lambda n: -(-n * 8 // CHUNK_ROWS) + -(-n // CHUNK_ROWS)  # noqa: E731  (image variants, then orig)
    assert (small["census"]["batches"], large["census"]["batches"]) == (chunks(12), chunks(48))  # every row scored
    assert large["census"]["bytes"] <= 1.1 * small["census"]["bytes"]
    assert large["census"]["images"] <= 1.1 * small["census"]["images"]
    assert large["census"]["bytes"] < 48 * 9 * per_image / 4  # the source photos and their variants: 4x more

    kept = _run(photo_gate, monkeypatch, 48, cache_mb=1024, name="kept")
    assert kept["census"]["bytes"] > 2 * large["census"]["bytes"]  # this one did keep them
    assert large["predictions"] == kept["predictions"] and large["predictions"].count("\n") == 48 * 9
    assert large["journal"] == kept["journal"]
    strip = lambda s: {k: v for k, v in s.items() if k != "meta"}  # noqa: E731  (meta holds timings)
    assert strip(large["summary"]) == strip(kept["summary"])


GIVE_BACK_CENSUS = """
import os
from laya_robustness.run.pipeline import variant_rows

calls = []
real = variant_rows.give_back_freed_memory


def counted():
    calls.append(1)
    return real()


variant_rows.give_back_freed_memory = counted


def pytest_unconfigure(config):
    with open(os.environ["LAYA_GIVE_BACK_FILE"], "w") as fh:
        fh.write(str(len(calls)))
"""


@pytest.mark.parametrize("keep", ["yes", "no"])
def test_memory_malloc_keeps_is_given_back_as_images_are_let_go_and_at_each_cells_end(photo_gate, monkeypatch, keep):
    """Kept for reuse, freed memory is given back after a scoring chunk once the variant images let go since the
    last give-back exceed half the image store's bound (4 MiB here: every second chunk of the image cell), and at
    each cell's end; left as it is, malloc is not touched."""
    if keep == "yes" and platform.libc_ver()[0] != "glibc":
        pytest.skip("the setting is glibc's")
    photo_gate.makepyfile(give_back_census=GIVE_BACK_CENSUS)
    counted = photo_gate.path / "give_back.txt"
    monkeypatch.setenv("LAYA_GIVE_BACK_FILE", str(counted))
    n, store_mb = 40, 4
    run = _run(photo_gate, monkeypatch, n, store_mb, f"keep-{keep}", "--keep-freed-memory", keep,
               "-p", "give_back_census")
    image_chunks, orig_chunks = -(-n * 8 // CHUNK_ROWS), -(-n // CHUNK_ROWS)  # 10 and 2
    assert run["census"]["batches"] == image_chunks + orig_chunks  # one score_batch call per chunk at --batch-size 2
    per_image = PHOTO[0] * PHOTO[1] * 3  # each image variant row has an image of its own
    expected, let_go = 2, 0  # each cell's end, then the image chunks that bring the images let go over the mark
    for start in range(0, n * 8, CHUNK_ROWS):
        let_go += min(CHUNK_ROWS, n * 8 - start) * per_image
        if let_go > (store_mb << 20) // 2:
            expected, let_go = expected + 1, 0
    assert expected == 2 + image_chunks // 2
    assert int(counted.read_text()) == (expected if keep == "yes" else 0)

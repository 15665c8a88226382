"""Fuzzed loaders: every JSONL file, TSV file and parquet table either loads or raises one RowErrors naming the file
in each of its problems.

Bounded and deterministic (``derandomize=True``, no example database), a few seconds in all.
"""

import base64
import io
import json
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from laya_robustness.loaders import LoadSettings, RowErrors, load_jsonl, load_rows, load_tsv
from laya_robustness.loaders.problems import SHOWN
from laya_robustness.rows import PRIMITIVES, RECORD_FIELDS

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=120,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: A small limit, so that the header-only "big" image is over it without being big.
LIMITS = LoadSettings(max_image_pixels=10_000)


def _png(colour=(255, 0, 0)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


def _header_only_png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


PNG = _png()
IMAGE_FILES = {"a.png": PNG, "bad.png": b"not an image", "trunc.png": PNG[: len(PNG) // 2],
               "big.png": _header_only_png(200, 200), "hollow.png": _header_only_png(4, 4)}
IMAGE_NAMES = (*IMAGE_FILES, "nope.png", "../a.png", "/etc/hostname", "", "sub/../a.png", "a\x00.png", ".")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz")
    for name, data in IMAGE_FILES.items():
        (path / name).write_bytes(data)
    return path


def _assert_loads_or_names_the_file(load, path):
    """The file loads, or one RowErrors names each of its problems in this file, in line (or row) order."""
    try:
        load(path)
    except RowErrors as exc:
        assert exc.problems and all(p.path == str(path) for p in exc.problems), exc
        lines = [-1 if p.line is None else p.line for p in exc.problems]
        assert lines == sorted(lines), exc
        assert str(exc).count(str(path)) >= min(len(exc.problems), SHOWN), exc


# -- JSONL --------------------------------------------------------------------------------------


def mostly(good, bad):
    """Usually (8 in 9) a valid value, so the fuzzer reaches the later checks; sometimes anything."""
    return st.integers(0, 8).flatmap(lambda i: bad if i == 8 else good)


short_text = st.text(max_size=6)
junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.floats(), short_text,
                 st.lists(st.one_of(short_text, st.integers()), max_size=3),
                 st.dictionaries(short_text, st.integers(), max_size=2))
words = st.text(alphabet="abc ?\u00e9\t", min_size=1, max_size=6)
REQUIRED = {
    "row_id": mostly(st.sampled_from(["s/0", "s/1", "s/2", "t/0"]), junk),
    "dataset": mostly(st.sampled_from(["s", "t"]), junk),
    "question": mostly(words, junk),
    "options": mostly(st.lists(words, min_size=2, max_size=4), junk),
    "label": mostly(st.integers(-1, 3), junk),
}
OPTIONAL = {
    "primitive": mostly(st.sampled_from(PRIMITIVES), junk),
    "answers": mostly(st.lists(words, max_size=3), junk),
    "images": mostly(st.lists(st.sampled_from(IMAGE_NAMES), max_size=2), junk),
    "group_id": mostly(words, junk), "cluster": mostly(words, junk),
    "context": mostly(st.one_of(st.none(), short_text), junk),
    "category": mostly(st.one_of(st.none(), short_text), junk),
    "meta": mostly(st.dictionaries(short_text, st.integers(), max_size=2), junk),
}


@st.composite
def records(draw) -> dict:
    record = draw(st.fixed_dictionaries(REQUIRED, optional=OPTIONAL))
    mutation = draw(mostly(st.just("none"), st.sampled_from(["drop", "add"])))
    if mutation == "drop":
        del record[draw(st.sampled_from(sorted(record)))]
    elif mutation == "add":
        record[draw(st.sampled_from(["quesiton", "extra"]))] = draw(junk)
    return record


lines = mostly(records().map(lambda r: json.dumps(r).encode()),
               st.one_of(st.just(b""), st.binary(max_size=24),
                         st.text(max_size=24).map(lambda t: t.encode("utf-8", "surrogatepass"))))


@FUZZ
@given(st.lists(lines, min_size=1, max_size=3))
def test_fuzzed_jsonl_loads_or_raises_a_row_error(data_dir, content):
    path = data_dir / "fuzz.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in content) + b"\n")
    _assert_loads_or_names_the_file(lambda p: load_jsonl(p, LIMITS), path)


# -- VLMEvalKit TSV -----------------------------------------------------------------------------

B64 = base64.b64encode(PNG).decode()
cell_text = mostly(st.text(alphabet=st.sampled_from("ab AB,[]'\"\\nN\u00e9"), max_size=8),
                   st.text(alphabet=st.sampled_from("a\t\n\r\"\x00"), max_size=4))
HEADERS = (("index", "image", "question", "hint", "A", "B", "C", "D", "answer", "category"),
           ("index", "image", "question", "answer", "category"),
           ("index", "image_path", "question", "A", "B", "answer"))
CELLS = {
    "index": mostly(st.sampled_from(["1", "2", "3"]), cell_text),
    "image": mostly(st.sampled_from([B64, B64, "1", "2", "9", f"['{B64}', '{B64}']"]),
                    st.one_of(cell_text, st.sampled_from(["", "nan", "[x", "!" * 70,
                                                          base64.b64encode(b"x" * 60).decode()]))),
    "image_path": mostly(st.sampled_from(["a.png", "['a.png', 'a.png']"]), st.sampled_from(IMAGE_NAMES)),
    "question": mostly(words, cell_text),
    "answer": mostly(st.sampled_from(["A", "B", "C", "['x', 'y']", "x"]),
                     st.one_of(st.sampled_from(["D", "BC", "", "nan", "[1]", "a", "[]"]), cell_text)),
    **{letter: mostly(words, st.sampled_from(["", "nan", "None"])) for letter in "ABCD"},
}


@st.composite
def tsv_files(draw) -> bytes:
    header = list(draw(st.sampled_from(HEADERS)))
    mutation = draw(mostly(st.just("none"), st.sampled_from(["drop", "duplicate", "add"])))
    if mutation == "drop":
        header.remove(draw(st.sampled_from(header)))
    elif mutation in ("duplicate", "add"):
        header.append(draw(st.sampled_from(header)) if mutation == "duplicate" else draw(cell_text))
    rows = draw(st.lists(st.fixed_dictionaries({c: CELLS.get(c, cell_text) for c in header}), min_size=1, max_size=4))
    text = "\t".join(header) + "\n" + "".join("\t".join(r[c] for c in header) + "\n" for r in rows)
    tail = draw(mostly(st.just(b""), st.binary(max_size=12)))
    return text.encode("utf-8", "surrogatepass") + tail


@FUZZ
@given(tsv_files())
def test_fuzzed_tsv_loads_or_raises_a_row_error(data_dir, content):
    path = data_dir / "fuzz.tsv"
    path.write_bytes(content)
    _assert_loads_or_names_the_file(lambda p: load_tsv(p, LIMITS), path)


# -- parquet ------------------------------------------------------------------------------------

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
image_struct = st.one_of(st.none(), st.fixed_dictionaries({
    "bytes": st.one_of(st.none(), st.sampled_from(list(IMAGE_FILES.values())), st.binary(max_size=8)),
    "path": st.one_of(st.none(), st.sampled_from(IMAGE_NAMES))}))


def _column(n: int):
    """A strategy for one typed column of n values."""
    def values(element):
        return st.lists(st.one_of(st.none(), element), min_size=n, max_size=n)

    return st.one_of(
        values(short_text).map(lambda v: pa.array(v, pa.string())),
        values(st.integers(-2, 4)).map(lambda v: pa.array(v, pa.int64())),
        values(st.floats(allow_nan=True)).map(lambda v: pa.array(v, pa.float64())),
        values(st.lists(short_text, max_size=4)).map(lambda v: pa.array(v, pa.list_(pa.string()))),
        values(image_struct).map(lambda v: pa.array(v, IMAGE_TYPE)),
        values(st.lists(image_struct, max_size=2)).map(lambda v: pa.array(v, pa.list_(IMAGE_TYPE))),
        values(st.sampled_from(list(IMAGE_FILES.values()))).map(lambda v: pa.array(v, pa.binary())),
        values(st.sampled_from(['{"k": 1}', "{", "[]", "null"])).map(lambda v: pa.array(v, pa.string())),
    )


@st.composite
def tables(draw):
    n = draw(st.integers(1, 3))

    def typed(element, arrow_type):
        return st.lists(mostly(element, st.none()), min_size=n, max_size=n).map(
            lambda v: pa.array(v, arrow_type))

    usual = {
        "question": typed(words, pa.string()),
        "options": typed(st.lists(words, min_size=2, max_size=3), pa.list_(pa.string())),
        "label": typed(st.integers(-1, 2), pa.int64()),
        "images": typed(st.lists(image_struct, max_size=2), pa.list_(IMAGE_TYPE)),
        "answers": typed(st.lists(words, max_size=2), pa.list_(pa.string())),
    }
    columns = {name: draw(mostly(strategy, _column(n)))
               for name, strategy in usual.items() if draw(st.booleans()) or name != "answers"}
    for name in draw(st.lists(st.sampled_from((*RECORD_FIELDS, "image", "prompt")), max_size=2, unique=True)):
        columns[name] = draw(_column(n))
    if draw(st.integers(0, 5)) == 0:
        del columns[draw(st.sampled_from(sorted(columns)))]
    return pa.table(columns)


@FUZZ
@given(tables(), mostly(st.just(""), st.sampled_from(["question=prompt", "images=image", "images=", "label=prompt"])))
def test_fuzzed_parquet_loads_or_raises_a_row_error(data_dir, table, data_map):
    from laya_robustness.loaders.settings import parse_data_map

    path = data_dir / "fuzz.parquet"
    pq.write_table(table, path)
    settings = LoadSettings(parse_data_map(data_map), max_image_pixels=LIMITS.max_image_pixels)
    _assert_loads_or_names_the_file(lambda p: load_rows(p, settings), path)

"""Parquet files and datasets directories: same rows and predictions as JSONL, column maps, lazy pixels."""

import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from laya_robustness.__main__ import main  # noqa: E402
from laya_robustness.loaders import LoadSettings, MissingExtraError, RowErrors, load_rows, scan_rows  # noqa: E402
from laya_robustness.loaders.export import export_parquet  # noqa: E402
from laya_robustness.loaders.image_refs import ImageRef  # noqa: E402
from laya_robustness.loaders.settings import parse_data_map  # noqa: E402
from laya_robustness.rows import RowError  # noqa: E402
from laya_robustness.run.inputs.run_inputs import load_source_rows
from laya_robustness.run.pipeline.chunks import Scoring

from helpers.images import cut, encoded  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_ROWS = ROOT / "laya_fixtures" / "rows"
EMBEDDED_MODEL = ROOT / "laya_fixtures" / "tiny-smolvlm"
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _png(colour=(255, 0, 0), size=(8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


PNG_CUT, JPEG_CUT = cut(encoded("PNG")), cut(encoded("JPEG"))


def _fields(row) -> dict:
    return {f.name: getattr(row, f.name) for f in dataclasses.fields(row) if f.name != "images"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("parquet")
    export_parquet(FIXTURE_ROWS, out)
    return out


def test_the_fixture_sets_as_parquet_give_identical_rows(exported, fixture_rows):
    from_parquet = load_rows(exported)
    assert list(from_parquet) == list(fixture_rows)
    for name, rows in fixture_rows.items():
        assert len(from_parquet[name]) == len(rows) == 240
        for a, b in zip(rows, from_parquet[name]):
            assert _fields(a) == _fields(b)
            assert [(im.mode, im.size, im.tobytes()) for im in a.images] == \
                   [(im.mode, im.size, im.tobytes()) for im in b.images]


def test_scoring_rows_from_either_form_gives_the_same_prediction_records(exported, embedded_scorer):
    scoring = Scoring(embedded_scorer)
    from_jsonl = load_source_rows(FIXTURE_ROWS, 4, seed=3)
    from_parquet = load_source_rows(exported, 4, seed=3)
    assert [r.row_id for rows in from_jsonl.values() for r in rows] == \
           [r.row_id for rows in from_parquet.values() for r in rows]
    a = scoring.records([r for rows in from_jsonl.values() for r in rows])
    b = scoring.records([r for rows in from_parquet.values() for r in rows])
    assert len(a) == 20 and json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_the_exported_file_is_a_datasets_parquet_with_image_features(exported):
    schema = pq.read_schema(exported / "colour_choice.parquet")
    features = json.loads(schema.metadata[b"huggingface"])["info"]["features"]
    assert features["images"] == {"feature": {"_type": "Image"}, "_type": "List"}
    assert schema.field("images").type == pa.list_(IMAGE_TYPE)


def test_export_parquet_command(tmp_path, capsys):
    assert main(["export-parquet", str(FIXTURE_ROWS / "count_choice.jsonl"), str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path}/count_choice.parquet\n"
    assert [r.row_id for r in load_rows(tmp_path)["count_choice"]][:2] == ["count_choice/000000",
                                                                          "count_choice/000001"]
    assert main(["export-parquet", str(tmp_path / "nowhere"), str(tmp_path)]) == 4
    assert capsys.readouterr().err == f"error: no rows at {tmp_path}/nowhere\n"
    with pytest.raises(SystemExit):
        main(["export-parquet", str(FIXTURE_ROWS), str(tmp_path), "--max-image-pixels", "lots"])
    assert "--max-image-pixels: 'lots' is not a positive pixel count" in capsys.readouterr().err


def test_only_sampled_rows_have_their_pixels_decoded(monkeypatch):
    decoded = []
    real = ImageRef.decode
    monkeypatch.setattr(ImageRef, "decode", lambda self: decoded.append(self) or real(self))
    rows = load_source_rows(FIXTURE_ROWS, 3, seed=0)
    assert sum(len(v) for v in rows.values()) == 15 and len(decoded) == 15


def _table(path, columns: dict, schema=None):
    pq.write_table(pa.table(columns, schema=schema), path)
    return path


def test_a_hugging_face_style_table_read_through_a_data_map(tmp_path):
    image = {"bytes": _png((0, 255, 0)), "path": None}
    path = _table(tmp_path / "vqa.parquet", {
        "prompt": ["Which shape?", "Which colour?"],
        "choices": [["circle", "square"], ["red", "green", "blue"]],
        "answer_idx": [1, 1],
        "image": pa.array([image, image], IMAGE_TYPE),
        "question_id": [101, 102],
        "image_id": [7, 7],
    })
    settings = LoadSettings(parse_data_map("question=prompt,options=choices,label=answer_idx,images=image,"
                                           "cluster=image_id"))
    rows = load_rows(path, settings)["vqa"]
    assert [(r.row_id, r.group_id, r.cluster, r.question, r.options, r.label, r.primitive) for r in rows] == [
        ("vqa/0", "vqa/0", "7", "Which shape?", ("circle", "square"), 1, "choice"),
        ("vqa/1", "vqa/1", "7", "Which colour?", ("red", "green", "blue"), 1, "choice")]
    assert rows[0].images[0].getpixel((0, 0)) == (0, 255, 0)
    with_ids = LoadSettings({**settings.data_map, "row_id": "question_id"})
    assert [r.row_id for r in load_rows(path, with_ids)["vqa"]] == ["101", "102"]


IMAGES_UNMAPPED = ("images", "no column 'images', but there is 'image': map it with --data-map images=image (or "
                             "images= to read none)")
QUESTION_UNMAPPED = ("question", "no column for it (columns: prompt, choices, answer_idx, image); map one with "
                                 "--data-map question=<column>")
OPTIONS_UNMAPPED = ("options", "no 'options' column (choice rows) and no 'answers' column (open rows) (columns: "
                               "prompt, choices, answer_idx, image); map one with --data-map options=<column> or "
                               "answers=<column>")


@pytest.mark.parametrize("data_map, problems", [
    ("", [IMAGES_UNMAPPED, QUESTION_UNMAPPED, OPTIONS_UNMAPPED]),
    ("images=image", [QUESTION_UNMAPPED, OPTIONS_UNMAPPED]),
    ("images=image,question=prompt", [OPTIONS_UNMAPPED]),
    ("images=image,question=promt", [("question", "column 'promt' (--data-map question=promt) is not in the "
                                                  "file; its columns: prompt, choices, answer_idx, image"),
                                     OPTIONS_UNMAPPED]),
])
def test_unmapped_columns_are_named_with_the_fix(tmp_path, data_map, problems):
    """Every field whose column is missing is named at once, each with the --data-map entry that maps it."""
    path = _table(tmp_path / "vqa.parquet", {"prompt": ["Q?"], "choices": [["a", "b"]], "answer_idx": [0],
                                             "image": pa.array([None], IMAGE_TYPE)})
    with pytest.raises(RowErrors) as info:
        scan_rows(path, LoadSettings(parse_data_map(data_map)))
    assert [str(p) for p in info.value.problems] == [f"{path}: field '{field}': {what}" for field, what in problems]
    assert all(p.fix == f"name a column '{p.field_name}', or map one to it with --data-map {p.field_name}=<column>"
               for p in info.value.problems)


@pytest.mark.parametrize("column, values, field, problem", [
    ("label", pa.array([1.0, 0.0]), "label", "expected an int (the gold option's index), got a float"),
    ("label", pa.array([0, 5]), "label", "5 is not an index into 2 options"),
    ("category", pa.array([None, 4]), "category", "expected a string or null, got an int"),
    ("meta", pa.array(["{}", "[1]"]), "meta", "expected an object, got a list"),
    ("meta", pa.array(["{}", "{oops"]), "meta", "not a JSON object: Expecting property name enclosed in double "
                                                "quotes: line 1 column 2 (char 1)"),
    ("question", pa.array(["Q?", None]), "question", "expected a string, got null"),
    ("images", pa.array([[], [{"bytes": None, "path": None}]], pa.list_(IMAGE_TYPE)), "images[0]",
     "an image with neither bytes nor a path"),
    ("images", pa.array([[], ["/etc/hostname"]]), "images[0]",
     "absolute image path '/etc/hostname' is outside the data directory {dir}; pass --allow-outside-data yes to "
     "read it"),
    ("images", pa.array([[], [b"junk"]]), "images[0]", "cannot identify image the 4-byte payload: "
                                                       "UnidentifiedImageError: cannot identify image file "
                                                       "<_io.BytesIO object at"),
    ("images", pa.array([[], [{"bytes": PNG_CUT, "path": None}]], pa.list_(IMAGE_TYPE)), "images[0]",
     f"image the {len(PNG_CUT)}-byte payload is cut short or damaged: OSError: "),
    ("images", pa.array([[], [JPEG_CUT]]), "images[0]",
     f"image the {len(JPEG_CUT)}-byte payload is cut short or damaged: its data ends before its end-of-image marker"),
])
def test_bad_cells_name_file_row_and_field(tmp_path, column, values, field, problem):
    columns = {"question": ["Q?", "Q?"], "options": [["a", "b"], ["a", "b"]], "label": [0, 1]}
    columns[column] = values
    path = _table(tmp_path / "t.parquet", columns)
    with pytest.raises(RowErrors) as info:
        scan_rows(path)
    float_labels = column == "label" and values.type == pa.float64()  # a float column has no int row
    rows = [0, 1] if float_labels else [1]
    assert [(p.line, p.unit, p.field_name) for p in info.value.problems] == [(row, "row", field) for row in rows]
    first = info.value.problems[0]
    assert str(first).startswith(f"{path} row {rows[0]}: field '{field}': {problem.format(dir=tmp_path)}")


def test_open_rows_from_an_answers_column(tmp_path):
    path = _table(tmp_path / "docvqa.parquet", {"question": ["What is the total?", "Who signed?"],
                                                "answers": [["$12", "12 dollars"], ["J. Doe"]]})
    rows = load_rows(path)["docvqa"]
    assert [(r.primitive, r.options, r.label, r.answers) for r in rows] == [
        ("open", (), -1, ("$12", "12 dollars")), ("open", (), -1, ("J. Doe",))]
    path = _table(tmp_path / "docvqa.parquet", {"question": ["Q?"], "answers": [[]]})
    with pytest.raises(RowError, match=r"row 0: field 'options': missing"):
        scan_rows(path)


def test_shards_form_one_dataset_named_after_their_directory(tmp_path):
    shards = tmp_path / "textvqa"
    shards.mkdir()
    (shards / "images").mkdir()
    (shards / "images" / "a.png").write_bytes(_png((1, 2, 3)))
    for i, n in enumerate((3, 2)):
        _table(shards / f"train-{i:05d}-of-00002.parquet",
               {"question": [f"Q{i}.{j}" for j in range(n)], "answers": [["x"]] * n, "images": [["images/a.png"]] * n})
    rows = load_rows(tmp_path)["textvqa"]
    assert [r.row_id for r in rows] == [f"textvqa/{i}" for i in range(5)]
    assert [r.question for r in rows] == ["Q0.0", "Q0.1", "Q0.2", "Q1.0", "Q1.1"]
    assert rows[4].images[0].getpixel((0, 0)) == (1, 2, 3)
    assert list(load_rows(shards)) == ["textvqa"]


def test_a_save_to_disk_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"question": datasets.Value("string"),
                                  "options": datasets.List(datasets.Value("string")),
                                  "label": datasets.ClassLabel(names=["first", "second"]),
                                  "images": datasets.List(datasets.Image())})
    ds = datasets.Dataset.from_dict({"question": ["A?", "B?"], "options": [["x", "y"], ["y", "x"]], "label": [0, 1],
                                     "images": [[{"bytes": _png((9, 9, 9)), "path": None}], []]},
                                    features=features)
    ds.save_to_disk(str(tmp_path / "my_set"))
    rows = load_rows(tmp_path / "my_set")["my_set"]
    assert [(r.row_id, r.label, len(r.images)) for r in rows] == [("my_set/0", 0, 1), ("my_set/1", 1, 0)]
    assert rows[0].images[0].getpixel((0, 0)) == (9, 9, 9)
    datasets.DatasetDict({"validation": ds}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(RowErrors) as info:
        scan_rows(tmp_path / "dict")
    [problem] = info.value.problems
    assert str(problem) == (f"{tmp_path}/dict/dataset_dict.json: field '<file>': a DatasetDict (splits: "
                               f"validation); point --data at one split, e.g. {tmp_path}/dict/validation")


def test_a_file_that_is_not_parquet(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(RowError, match=r"t\.parquet: field '<file>': cannot read the table: "):
        scan_rows(path)
    other = tmp_path / "t.csv"
    other.write_text("a,b\n")
    with pytest.raises(RowError, match=r"t\.csv: field '<file>': unsupported file type '\.csv'"):
        scan_rows(other)


def test_the_problems_of_a_manifest_table_rows_and_a_broken_shard_are_named_at_once(tmp_path, capsys):
    """A manifest's bad line, two bad rows of a shard and a shard that is not parquet: one error (exit 4 from the
    command line) names each, in file and row order, each with its fix."""
    manifest = tmp_path / "a.jsonl"
    manifest.write_text(json.dumps({"row_id": "a/0", "dataset": "a", "question": "Q?", "options": ["x", "y"],
                                    "label": 9}) + "\n")
    (tmp_path / "vqa").mkdir()
    shard = _table(tmp_path / "vqa" / "0.parquet", {"question": ["Q?", "Q?", None], "options": [["a", "b"]] * 3,
                                                     "label": [0, 5, 1]})
    (tmp_path / "vqa" / "1.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(RowErrors) as info:
        scan_rows(tmp_path)
    assert [(p.path, p.line, p.unit, p.field_name) for p in info.value.problems] == [
        (str(manifest), 1, "line", "label"), (str(shard), 1, "row", "label"), (str(shard), 2, "row", "question"),
        (f"{tmp_path}/vqa/1.parquet", None, "line", "<file>")]
    choice_label = "a choice row's 'label': the index of the right option in 'options', from 0"
    assert [p.fix for p in info.value.problems][:3] == [choice_label, choice_label,
                                                        "'question': the question's text, not empty"]
    assert main(["export-parquet", str(tmp_path), str(tmp_path / "out")]) == 4
    err = capsys.readouterr().err
    assert err.startswith("error: 4 problems in 3 files:\n") and not (tmp_path / "out").exists()
    assert all(f"  {p}\n    fix: {p.fix}\n" in err for p in info.value.problems)


def test_without_pyarrow_the_error_names_the_extra(tmp_path, monkeypatch):
    path = _table(tmp_path / "t.parquet", {"question": ["Q?"], "options": [["a", "b"]], "label": [0]})
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(MissingExtraError) as info:
        scan_rows(path)
    assert str(info.value) == (f"{path}: field '<file>': reading parquet files and datasets directories needs the "
                               f"'datasets' extra: pip install 'laya-robustness[datasets]'")

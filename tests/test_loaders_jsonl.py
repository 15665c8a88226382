"""JSONL manifests: typed fields, open-answer rows, bytes that are not UTF-8, unique ids, paths kept inside the data."""

import io
import json

import pytest
from PIL import Image

from laya_robustness.loaders import LoadSettings, load_jsonl, load_rows
from laya_robustness.rows import RowError


def _png(colour=(255, 0, 0)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="PNG")
    return buf.getvalue()


def _record(**changes):
    record = {"row_id": "s/0", "dataset": "s", "group_id": "s/0", "cluster": "s/img0", "images": ["a.png"],
              "question": "What colour?", "options": ["red", "blue"], "label": 1, "primitive": "choice",
              "context": None, "category": "c", "meta": {}}
    record.update(changes)
    return {k: v for k, v in record.items() if v is not ...}


def _manifest(tmp_path, records, name="s.jsonl"):
    (tmp_path / "a.png").write_bytes(_png())
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _error(path, settings=None) -> RowError:
    with pytest.raises(RowError) as info:
        load_jsonl(path, settings)
    return info.value


@pytest.mark.parametrize("changes, message", [
    ({"group_id": 7}, "field 'group_id': expected a string, got an int"),
    ({"cluster": 3}, "field 'cluster': expected a string, got an int"),
    ({"category": 5}, "field 'category': expected a string or null, got an int"),
    ({"context": ["a"]}, "field 'context': expected a string or null, got a list"),
    ({"row_id": ""}, "field 'row_id': empty"),
    ({"question": "  "}, "field 'question': empty"),
    ({"label": True}, "field 'label': expected an int (the gold option's index), got a bool"),
    ({"label": 1.0}, "field 'label': expected an int (the gold option's index), got a float"),
    ({"options": "red,blue"}, "field 'options': expected a list of strings, got a string"),
    ({"options": ["red", 2]}, "field 'options': item 1 is an int, expected a non-empty string"),
    ({"images": "a.png"}, "field 'images': expected a list of relative paths, got a string"),
    ({"images": [1]}, "field 'images[0]': expected a relative path, got an int"),
    ({"meta": []}, "field 'meta': expected an object, got a list"),
    ({"meta": {"rotation_variant": "yes"}}, "field 'meta.rotation_variant': expected true or false, got 'yes'"),
    ({"meta": {"rephrasings": "Is it red?"}}, "field 'meta.rephrasings': expected a list of strings, got 'Is it red?'"),
    ({"meta": {"translations": {"French": "Est-ce rouge ?"}}},
     "field 'meta.translations': 'French' is not a language code (lower-case ISO 639, optionally with a region)"),
    ({"meta": {"translations": {"fr": 3}}}, "field 'meta.translations.fr': expected a string, got 3"),
    ({"quesiton": "x"}, "field 'quesiton': unknown field; did you mean 'question'? (fields: row_id, dataset, "
                        "group_id, cluster, images, question, options, label, primitive, answers, context, "
                        "category, meta; put anything else under 'meta')"),
    ({"answers": ["red"]}, "field 'answers': only open rows have answers; a choice row's gold is its label"),
])
def test_wrong_typed_fields_are_caught_at_load(tmp_path, changes, message):
    path = _manifest(tmp_path, [_record(**changes)])
    assert str(_error(path)) == f"{path}:1: {message}"


def test_meta_keys_no_family_reads_are_the_users_and_those_it_reads_load_when_right(tmp_path):
    meta = {"rotation_variant": False, "rephrasings": ["Is it red?"], "translations": {"pt-BR": "É vermelho?"},
            "source": {"any": ["thing", 1]}}
    [row] = load_jsonl(_manifest(tmp_path, [_record(meta=meta)]))
    assert row.meta == meta


def test_a_key_given_twice_is_refused(tmp_path):
    path = tmp_path / "s.jsonl"
    (tmp_path / "a.png").write_bytes(_png())
    text = json.dumps(_record())[:-1] + ', "label": 0}'
    path.write_text(text + "\n")
    assert str(_error(path)) == f"{path}:1: field 'label': given twice in one object"


def test_open_rows(tmp_path):
    path = _manifest(tmp_path, [_record(primitive="open", options=..., label=..., answers=["red", "crimson"]),
                                _record(row_id="s/1", primitive="open", options=[], label=-1, answers=["blue"])])
    rows = load_jsonl(path)
    assert [(r.primitive, r.options, r.label, r.answers) for r in rows] == [
        ("open", (), -1, ("red", "crimson")), ("open", (), -1, ("blue",))]


@pytest.mark.parametrize("changes, message", [
    ({"answers": ...}, "field 'answers': missing (an open row needs a non-empty list of accepted answers)"),
    ({"answers": []}, "field 'answers': an open row needs a non-empty list of accepted answers"),
    ({"answers": ["ok", " "]}, "field 'answers': item 1 is an empty string"),
    ({"answers": "red"}, "field 'answers': expected a list of strings, got a string"),
    ({"options": ["a", "b"]}, "field 'options': an open row has no options (its accepted answers go in 'answers')"),
    ({"label": 0}, "field 'label': an open row has label -1 or none (it has no option index), got 0"),
])
def test_open_row_errors(tmp_path, changes, message):
    base = {"primitive": "open", "options": ..., "label": ..., "answers": ["red"]}
    path = _manifest(tmp_path, [_record(**{**base, **changes})])
    assert str(_error(path)) == f"{path}:1: {message}"


def test_answers_without_the_open_primitive_say_how_to_fix_it(tmp_path):
    path = _manifest(tmp_path, [_record(primitive=..., options=..., label=..., answers=["red"])])
    assert str(_error(path)) == (f"{path}:1: field 'options': missing (a row with accepted answers and no options "
                                 f"needs \"primitive\": \"open\")")


def test_a_non_utf8_byte_names_line_and_field(tmp_path):
    path = _manifest(tmp_path, [_record(), _record(row_id="s/1")])
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"What colour?", b"What colo\xfcr?")
    path.write_bytes(b"".join(lines))
    column = lines[1].index(b"\xfc") + 1
    assert str(_error(path)) == f"{path}:2: field 'question': not UTF-8: byte 0xfc at byte {column} of the line"
    lines[1] = lines[1].replace(b'"question"', b'"quest\xfcion"')
    path.write_bytes(b"".join(lines))
    assert _error(path).field_name == "<json>"


def test_a_utf8_bom_and_blank_lines_are_fine(tmp_path):
    path = _manifest(tmp_path, [_record()])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes() + b"\n  \n")
    assert [r.row_id for r in load_jsonl(path)] == ["s/0"]


def test_deeply_nested_json_is_a_row_error(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("[" * 100_000 + "\n")
    assert str(_error(path)) == f"{path}:1: field '<json>': nested too deeply"


def test_a_duplicate_row_id_names_both_places_across_files(tmp_path):
    _manifest(tmp_path, [_record(), _record(row_id="s/1")], name="a.jsonl")
    second = _manifest(tmp_path, [_record(row_id="s/2", dataset="t"), _record(row_id="s/1", dataset="t")],
                       name="b.jsonl")
    with pytest.raises(RowError) as info:
        load_rows(tmp_path)
    assert str(info.value) == (f"{second}:2: field 'row_id': 's/1' is also the row_id of {tmp_path}/a.jsonl:2 "
                               f"(row ids must be unique across every file of --data)")
    path = _manifest(tmp_path, [_record(), _record()], name="a.jsonl")
    assert str(_error(path)) == (f"{path}:2: field 'row_id': 's/0' is also the row_id of {path}:1 (row ids must be "
                                 f"unique across every file of --data)")


def test_image_paths_outside_the_data_directory_need_the_option(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "outside.png").write_bytes(_png((0, 0, 255)))
    path = _manifest(data, [_record(images=["../outside.png"])])
    assert str(_error(path)) == (f"{path}:1: field 'images[0]': image path '../outside.png' leads outside the data "
                                 f"directory {data}; pass --allow-outside-data yes to read it")
    absolute = str(tmp_path / "outside.png")
    path = _manifest(data, [_record(images=[absolute])])
    assert str(_error(path)) == (f"{path}:1: field 'images[0]': absolute image path {absolute!r} is outside the data "
                                 f"directory {data}; pass --allow-outside-data yes to read it")
    allowed = LoadSettings(allow_outside_data=True)
    assert load_jsonl(path, allowed)[0].images[0].getpixel((0, 0)) == (0, 0, 255)
    path = _manifest(data, [_record(images=["sub/../a.png"])])
    assert load_jsonl(path)[0].images[0].getpixel((0, 0)) == (255, 0, 0)


def test_missing_image_file(tmp_path):
    path = _manifest(tmp_path, [_record(images=["nope.png"])])
    assert str(_error(path)) == (f"{path}:1: field 'images[0]': cannot read image {tmp_path}/nope.png: No such file "
                                 f"or directory")


@pytest.mark.parametrize("reader", ["paraphrases", "rephrasings", "translations"])
def test_the_users_jsonl_files_are_read_like_manifests(tmp_path, reader):
    """Paraphrase, rephrasing and translation files go through the manifests' reader: a non-UTF-8 byte and a
    key given twice are row errors naming the file, line and field, as in a manifest."""
    from laya_robustness.loaders.variants import load_paraphrases, read_user_file

    read = load_paraphrases if reader == "paraphrases" else (lambda p: read_user_file(p, reader))
    path = tmp_path / "user.jsonl"
    path.write_bytes(b'{"row_id": "a", "row_id": "b"}\n')
    with pytest.raises(RowError, match=r"user\.jsonl:1: field 'row_id': given twice in one object"):
        read(path)
    path.write_bytes(b'\n{"row_id": "caf\xe9"}\n')
    with pytest.raises(RowError, match=r"user\.jsonl:2: field 'row_id': not UTF-8: byte 0xe9"):
        read(path)


@pytest.mark.parametrize(("open_row", "hint"), [
    (False, "did you mean 'label' (a choice row's right answer: the index of the right option in 'options', from 0)?"),
    (True, "did you mean 'answers' (an open row's right answers: a list of the accepted texts)?"),
])
def test_a_right_answer_under_another_datasets_key_is_pointed_to_the_field_of_its_rows_kind(tmp_path, open_row, hint):
    """A row with ``answer`` was told "did you mean 'answers'?", the open rows' field, where a choice row needs
    ``label``."""
    record = _record()
    del record["label"]
    if open_row:
        del record["options"]
    record["answer"] = 1
    path = _manifest(tmp_path, [record])
    assert str(_error(path)).startswith(f"{path}:1: field 'answer': unknown field; {hint} (fields: ")

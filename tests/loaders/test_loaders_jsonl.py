"""JSONL manifests: typed fields, open-answer rows, bytes that are not UTF-8, unique ids, paths kept inside the data."""

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from laya_robustness.loaders import LoadSettings, RowErrors, load_jsonl, load_rows
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
    """The one problem the file's report names."""
    with pytest.raises(RowErrors) as info:
        load_jsonl(path, settings)
    [problem] = info.value.problems
    return problem


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
    ({"quesiton": "x"}, "field 'quesiton': unknown field"),
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
    with pytest.raises(RowErrors) as info:
        load_rows(tmp_path)
    [problem] = info.value.problems
    assert str(problem) == (f"{second}:2: field 'row_id': 's/1' is also the row_id of {tmp_path}/a.jsonl:2 "
                            f"(row ids must be unique across every file of --data)")
    assert problem.fix == f"give one of the two rows ({tmp_path}/a.jsonl:2, {second}:2) another 'row_id'"
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
    from laya_robustness.loaders.variant_files import load_paraphrases, read_user_file

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
    ``label``; the field it means is not also said to be missing."""
    record = _record()
    del record["label"]
    if open_row:
        del record["options"]
        record["primitive"] = "open"
    record["answer"] = 1
    path = _manifest(tmp_path, [record])
    problem = _error(path)
    assert str(problem) == f"{path}:1: field 'answer': unknown field"
    assert problem.fix.startswith(f"{hint} (the fields: row_id, dataset, ")


# -- every problem at once ----------------------------------------------------------------------------------------


def _lines(path, *lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_every_problem_of_every_row_and_file_is_named_at_once_with_the_fix_for_its_rows_kind(tmp_path):
    """Problems of several kinds on several rows of two files, a line that is not JSON among them: one error names
    every one, in file and line order, each with the fix for its row's kind; the good rows around them are read."""
    (tmp_path / "a.png").write_bytes(_png())
    no_dataset = {k: v for k, v in _record(row_id="a/1", label=..., answer=1).items() if k != "dataset"}
    first = _lines(tmp_path / "a.jsonl",
                   no_dataset,                                                                  # 1: two problems
                   _record(row_id="a/2"),                                                       # 2: good
                   _record(row_id="a/3", primitive="noul", options=["yes", "maybe"], label=0),  # 3: noul options
                   '{"row_id": "a/4", "question": ',                                            # 4: not JSON
                   _record(row_id="a/5", primitive="open", options=..., label=..., answers=[]),  # 5: open, no answers
                   _record(row_id="a/6"))                                                       # 6: good
    second = _lines(tmp_path / "b.jsonl",
                    _record(row_id="a/2", dataset="b"),                                  # 1: a/2 again
                    _record(row_id="b/2", dataset="b", question="", label=5))            # 2: two problems
    with pytest.raises(RowErrors) as info:
        load_rows(tmp_path)
    found = [(Path(p.path).name, p.line, p.field_name) for p in info.value.problems]
    assert found == [("a.jsonl", 1, "answer"), ("a.jsonl", 1, "dataset"), ("a.jsonl", 3, "options"),
                     ("a.jsonl", 4, "<json>"), ("a.jsonl", 5, "answers"), ("b.jsonl", 1, "row_id"),
                     ("b.jsonl", 2, "question"), ("b.jsonl", 2, "label")]
    fixes = [p.fix for p in info.value.problems]
    assert fixes[0].startswith("did you mean 'label' (a choice row's right answer: the index of the right option")
    assert fixes[1] == ("'dataset' is required in every row of a manifest: the name the reports group its rows "
                        "under, e.g. \"dataset\": \"a\"")
    assert fixes[2] == "a noul row's 'options': [\"no\", \"yes\"] (its label: 0 for no, 1 for yes)"
    assert fixes[3].startswith("write the line as one JSON object in UTF-8")
    assert fixes[4] == "an open row's 'answers': a non-empty list of the accepted answer texts"
    assert fixes[5] == f"give one of the two rows ({first}:2, {second}:1) another 'row_id'"
    assert fixes[7] == "a choice row's 'label': the index of the right option in 'options', from 0"
    report = str(info.value)
    assert report.splitlines()[0] == "8 problems in 2 files:"
    assert report.splitlines()[-1] == ("  the fields each kind of row needs, in each kind of file: "
                                       "docs/data.md#required-fields")
    for problem in info.value.problems:
        assert f"  {problem}\n    fix: {problem.fix}\n" in report


def test_a_line_that_is_not_json_is_named_and_the_next_line_read(tmp_path):
    (tmp_path / "a.png").write_bytes(_png())
    path = _lines(tmp_path / "s.jsonl", _record(), "{not json", "[1, 2]", _record(row_id="s/1", label=7),
                  _record(row_id="s/2"))
    latin1 = json.dumps(_record(row_id="s/3", question="caf\u00e9"), ensure_ascii=False).encode("latin-1")
    path.write_bytes(path.read_bytes() + latin1 + b"\n")  # line 6: a byte that is not UTF-8
    with pytest.raises(RowErrors) as info:
        load_jsonl(path)
    assert [(p.line, p.field_name) for p in info.value.problems] == [
        (2, "<json>"), (3, "<json>"), (4, "label"), (6, "question")]
    assert str(info.value.problems[1]) == f"{path}:3: field '<json>': expected an object, got list"
    assert info.value.problems[3].fix == "save the file as UTF-8"


def test_a_line_over_the_bound_is_skipped_whole_and_the_lines_after_it_counted_right(tmp_path, monkeypatch):
    import laya_robustness.loaders.jsonl as jsonl

    monkeypatch.setattr(jsonl, "MAX_LINE_BYTES", 64)
    (tmp_path / "a.png").write_bytes(_png())
    path = _lines(tmp_path / "s.jsonl", '{"row_id": "' + "x" * 300 + '"}', '{"row_id": 5}')
    with pytest.raises(RowErrors) as info:
        load_jsonl(path)
    assert [(p.line, p.field_name) for p in info.value.problems] == [
        (1, "<json>"), (2, "dataset"), (2, "row_id"), (2, "question"), (2, "options"), (2, "label")]


def test_the_report_shows_twenty_problems_and_counts_the_rest(tmp_path):
    (tmp_path / "a.png").write_bytes(_png())
    path = _manifest(tmp_path, [_record(row_id=f"s/{i}", label=9) for i in range(25)])
    with pytest.raises(RowErrors) as info:
        load_jsonl(path)
    assert len(info.value.problems) == 25 and not info.value.stopped
    lines = str(info.value).splitlines()
    assert lines[0] == f"25 problems in {path}, the first 20 shown:"
    assert [line for line in lines if line.startswith(f"  {path}:")] == [
        f"  {path}:{i}: field 'label': 9 is not an index into 2 options" for i in range(1, 21)]
    assert lines[-2:] == ["  ... and 5 more (every file was read to its end)",
                          "  the fields each kind of row needs, in each kind of file: docs/data.md#required-fields"]


def test_reading_stops_at_the_cap_and_says_so(tmp_path, monkeypatch):
    import laya_robustness.loaders.problems as problems

    monkeypatch.setattr(problems, "COUNT_CAP", 30)
    path = _manifest(tmp_path, [_record(row_id=f"s/{i}", label=9) for i in range(50)])
    with pytest.raises(RowErrors) as info:
        load_jsonl(path)
    assert len(info.value.problems) == 30 and info.value.stopped
    lines = str(info.value).splitlines()
    assert lines[0] == f"at least 30 problems in {path}, the first 20 shown:"
    assert lines[-2] == "  ... and 10 more counted before reading stopped at 30 problems"


def test_a_valid_manifest_loads_as_before_the_report(tmp_path):
    rows = load_jsonl(_manifest(tmp_path, [_record(row_id=f"s/{i}", label=i % 2) for i in (3, 1, 2)]))
    assert [(r.row_id, r.label) for r in rows] == [("s/3", 1), ("s/1", 1), ("s/2", 0)]

"""VLMEvalKit TSV: nothing is mislabelled silently; shared, listed and path images; open-answer rows."""

import base64
import io

import pytest
from PIL import Image

from laya_robustness.loaders import RowErrors, load_rows, load_tsv
from laya_robustness.rows import RowError

HEADER = "index\timage\tquestion\thint\tA\tB\tC\tD\tanswer\tcategory\n"


def _png(colour=(255, 0, 0), size=(8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


B64 = base64.b64encode(_png()).decode()
BLUE = base64.b64encode(_png((0, 0, 255))).decode()


def _tsv(tmp_path, lines, header=HEADER, name="bench.tsv"):
    path = tmp_path / name
    path.write_text(header + "".join(lines), encoding="utf-8")
    return path


def _problems(path, **kwargs) -> list[RowError]:
    """Every problem the file's report names."""
    with pytest.raises(RowErrors) as info:
        load_tsv(path, **kwargs)
    return info.value.problems


def _error(path, **kwargs) -> RowError:
    """The one problem the file's report names."""
    [problem] = _problems(path, **kwargs)
    return problem


@pytest.mark.parametrize("answer, message", [
    ("", "bench.tsv:2: field 'answer': empty: a choice row needs its gold option letter"),
    ("nan", "bench.tsv:2: field 'answer': 'nan' reads as a missing value (as pandas reads it): a choice row "
            "needs its gold option letter"),
    ("BC", "bench.tsv:2: field 'answer': 'BC' names several options; a row has exactly one gold letter (of A, B, C)"),
    ("b", "bench.tsv:2: field 'answer': 'b' is not an option letter (of A, B, C); did you mean 'B'?"),
    ("D", "bench.tsv:2: field 'answer': 'D' names an option this row does not have (its options: A, B, C)"),
    ("cat", "bench.tsv:2: field 'answer': 'cat' is not one of the row's option letters A, B, C"),
])
def test_a_bad_answer_is_refused_not_guessed(tmp_path, answer, message):
    path = _tsv(tmp_path, [f"1\t{B64}\tWhich?\t\tcat\tdog\tcow\t\t{answer}\tc\n"])
    err = _error(path)
    assert str(err) == f"{path.parent}/{message}"
    assert (err.line, err.field_name) == (2, "answer")


def test_a_gap_in_the_options_is_refused_instead_of_shifting_the_label(tmp_path):
    path = _tsv(tmp_path, [f"1\t{B64}\tWhich?\t\tcat\t\tcow\tpig\tC\tc\n"])
    assert str(_error(path)) == (f"{path}:2: field 'B': empty, but option C is not: a row's options are A, B, ... "
                                 f"without gaps")
    path = _tsv(tmp_path, [f"1\t{B64}\tWhich?\t\tcat\tNone\tcow\t\tA\tc\n"])
    assert "field 'B': 'None' reads as a missing value (as pandas reads it), but option C is not" in str(_error(path))


def test_a_row_with_only_index_and_image_is_refused(tmp_path):
    path = _tsv(tmp_path, [f"1\t{B64}\t\t\t\t\t\t\t\t\n"])
    assert [str(p) for p in _problems(path)] == [
        f"{path}:2: field 'question': empty",
        f"{path}:2: field 'A': empty: a choice row needs at least two options (A and B)",
        f"{path}:2: field 'answer': empty: a choice row needs its gold option letter"]
    path = _tsv(tmp_path, [f"1\t{B64}\n"])
    assert str(_error(path)) == f"{path}:2: field '<tsv>': 2 cells, but the header has 10 columns"


def test_one_option_is_not_a_choice_row(tmp_path):
    path = _tsv(tmp_path, [f"1\t{B64}\tWhich?\t\tcat\t\t\t\tA\tc\n"])
    assert str(_error(path)) == f"{path}:2: field 'B': empty: a choice row needs at least two options (A and B)"


@pytest.mark.parametrize("hint", ["nan", "NaN", "None", "NULL", "", "  n/a "])
def test_missing_value_words_are_no_hint(tmp_path, hint):
    path = _tsv(tmp_path, [f"1\t{B64}\tWhich?\t{hint}\tcat\tdog\t\t\tB\tNA\n"])
    (row,) = load_tsv(path)
    assert row.context is None and row.category is None
    assert (row.options, row.label, row.primitive) == (("cat", "dog"), 1, "choice")


def test_shared_image_reference_resolves_to_that_rows_image_and_cluster(tmp_path):
    path = _tsv(tmp_path, [f"10\t{BLUE}\tFirst?\t\ta\tb\t\t\tA\tc\n",
                           "11\t10\tSecond?\t\ta\tb\t\t\tB\tc\n",
                           "12\t11\tThird (a chain)?\t\ta\tb\t\t\tB\tc\n"])
    rows = load_tsv(path)
    assert [r.cluster for r in rows] == ["bench/10"] * 3
    assert [r.row_id for r in rows] == ["bench/10", "bench/11", "bench/12"]
    assert all(r.images[0].getpixel((0, 0)) == (0, 0, 255) for r in rows)


def test_a_dangling_or_circular_image_reference_names_both_rows(tmp_path):
    path = _tsv(tmp_path, [f"1\t{B64}\tQ?\t\ta\tb\t\t\tA\tc\n", "2\t7\tQ?\t\ta\tb\t\t\tA\tc\n"])
    assert str(_error(path)) == (f"{path}:3: field 'image': refers to the image of index '7', which no row of "
                                 f"bench.tsv has (a cell of at most 64 characters is another row's index)")
    path = _tsv(tmp_path, ["1\t2\tQ?\t\ta\tb\t\t\tA\tc\n", "2\t1\tQ?\t\ta\tb\t\t\tA\tc\n"])
    assert [str(p) for p in _problems(path)] == [
        f"{path}:2: field 'image': circular image reference: index '1' ({path}:2) -> index '2' ({path}:3) -> "
        f"index '1' ({path}:2)",
        f"{path}:3: field 'image': circular image reference: index '2' ({path}:3) -> index '1' ({path}:2) -> "
        f"index '2' ({path}:3)"]


def test_a_list_of_base64_images_gives_a_multi_image_row(tmp_path):
    path = _tsv(tmp_path, [f"1\t['{B64}', '{BLUE}']\tQ?\t\ta\tb\t\t\tA\tc\n"])
    (row,) = load_tsv(path)
    assert [im.getpixel((0, 0)) for im in row.images] == [(255, 0, 0), (0, 0, 255)]


def test_each_listed_image_of_a_row_is_checked_and_every_bad_one_named(tmp_path):
    """Two cut images in one row's list, base64 or paths: both named in one report (the first stopped the row)."""
    cut_b64 = base64.b64encode(_png()[:-20]).decode()
    path = _tsv(tmp_path, [f"1\t['{cut_b64}', '{B64}', '{cut_b64}']\tQ?\t\ta\tb\t\t\tA\tc\n"])
    assert [(p.line, p.field_name) for p in _problems(path)] == [(2, "image[0]"), (2, "image[2]")]
    (tmp_path / "cut.png").write_bytes(_png()[:-20])
    path = _tsv(tmp_path, ["1\t['cut.png', 'nope.png']\tQ?\ta\tb\tA\n"],
                header="index\timage_path\tquestion\tA\tB\tanswer\n")
    assert [(p.line, p.field_name) for p in _problems(path)] == [(2, "image_path[0]"), (2, "image_path[1]")]


def test_image_path_column_reads_files_beside_the_tsv(tmp_path):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes(_png((0, 255, 0)))
    header = "index\timage_path\tquestion\tA\tB\tanswer\n"
    path = _tsv(tmp_path, ["1\timgs/a.png\tQ?\ta\tb\tB\n", "2\t['imgs/a.png', 'imgs/a.png']\tQ?\ta\tb\tA\n"],
                header=header)
    rows = load_tsv(path)
    assert rows[0].images[0].getpixel((0, 0)) == (0, 255, 0) and len(rows[1].images) == 2
    path = _tsv(tmp_path, ["1\t../outside.png\tQ?\ta\tb\tB\n"], header=header)
    assert str(_error(path)) == (f"{path}:2: field 'image_path': image path '../outside.png' leads outside the "
                                 f"data directory {tmp_path}; pass --allow-outside-data yes to read it")


def test_a_row_without_any_image_is_refused(tmp_path):
    path = _tsv(tmp_path, ["1\t\tQ?\t\ta\tb\t\t\tA\tc\n"])
    assert str(_error(path)) == (f"{path}:2: field 'image': empty (a row needs an image; VLMEvalKit leaves rows "
                                 f"without one out)")


def test_open_answer_tsv_without_option_columns(tmp_path):
    header = "index\timage\tquestion\tanswer\tcategory\n"
    path = _tsv(tmp_path, [f"1\t{B64}\tWhat does the sign say?\tstop\tocr\n",
                           f"2\t{B64}\tWhat colour?\t['red', \"dark red\"]\tcolour\n",
                           f"3\t{B64}\tJSON list?\t[\"a\", \"b\"]\tcolour\n"], header=header)
    rows = load_tsv(path)
    assert [(r.primitive, r.options, r.label, r.answers) for r in rows] == [
        ("open", (), -1, ("stop",)), ("open", (), -1, ("red", "dark red")), ("open", (), -1, ("a", "b"))]
    for answer, message in [("", "empty: an open row (no option columns) needs its accepted answer"),
                            ("[]", "expected a non-empty list of strings, got '[]'"),
                            ("[1, 2]", "item 0 of the list is not a non-empty string"),
                            ("[oops", None), ("[not python]", "starts with '[' but is not a list literal: "
                                                              "'[not python]'")]:
        path = _tsv(tmp_path, [f"1\t{B64}\tQ?\t{answer}\tc\n"], header=header)
        if message is None:  # not a list literal: the text itself is the answer
            assert load_tsv(path)[0].answers == ("[oops",)
        else:
            assert str(_error(path)) == f"{path}:2: field 'answer': {message}"


def test_non_utf8_tsv_names_line_and_column(tmp_path):
    path = tmp_path / "bench.tsv"
    path.write_bytes(HEADER.encode() + f"1\t{B64}\tWhich?\tcaf".encode() + b"\xe9" + "\ta\tb\t\t\tA\tc\n".encode())
    assert str(_error(path)) == f"{path}:2: field 'hint': not UTF-8: byte 0xe9 at character 4 of the cell"


def test_utf8_bom_is_read_as_utf8(tmp_path):
    path = tmp_path / "bench.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + f"1\t{B64}\tQ?\t\ta\tb\t\t\tA\tc\n").encode())
    assert load_tsv(path)[0].row_id == "bench/1"


def test_duplicate_index_names_both_lines(tmp_path):
    path = _tsv(tmp_path, [f"1\t{B64}\tQ?\t\ta\tb\t\t\tA\tc\n", f"1\t{B64}\tQ?\t\ta\tb\t\t\tA\tc\n"])
    assert str(_error(path)) == (f"{path}:3: field 'row_id': 'bench/1' is also the row_id of {path}:2 (row ids "
                                 f"must be unique across every file of --data)")


@pytest.mark.parametrize("header, field, problem", [
    ("index\timage\tquestion\tA\tB\n", "answer", "column missing from the header"),
    ("index\tquestion\tA\tB\tanswer\n", "image", "column missing from the header (and no image_path column)"),
    ("index\timage\tquestion\tA\tB\tD\tanswer\n", "C", "column missing from the header, which has option "
                                                       "columns A, B, D"),
    ("index\timage\tquestion\tA\tanswer\n", "B", "column missing from the header: a choice TSV has option "
                                                 "columns A, B, ..."),
    ("index\timage\tquestion\tA\tA\tB\tanswer\n", "A", "column given twice in the header"),
])
def test_bad_headers(tmp_path, header, field, problem):
    path = _tsv(tmp_path, [], header=header)
    assert str(_error(path)) == f"{path}:1: field '{field}': {problem}"


def test_every_problem_of_a_header_is_named(tmp_path):
    path = _tsv(tmp_path, [f"1\t{B64}\tQ?\tA\n"], header="index\timage\tquestion\tA\tA\n")
    assert [(p.field_name, p.problem) for p in _problems(path)] == [
        ("A", "column given twice in the header"), ("answer", "column missing from the header"),
        ("B", "column missing from the header: a choice TSV has option columns A, B, ...")]


def test_bad_base64_and_a_huge_payload(tmp_path):
    path = _tsv(tmp_path, [f"1\t{'!' * 80}\tQ?\t\ta\tb\t\t\tA\tc\n"])
    assert str(_error(path)).startswith(f"{path}:2: field 'image': not a base64-encoded image:")
    big = base64.b64encode(b"\x00" * (2 << 20)).decode()
    path = _tsv(tmp_path, [f"1\t{big}\tQ?\t\ta\tb\t\t\tA\tc\n"])
    from laya_robustness.loaders import LoadSettings

    err = _error(path, settings=LoadSettings(max_image_pixels=100))
    assert str(err) == (f"{path}:2: field 'image': the encoded image is 2,097,152 bytes, over the limit of "
                        f"1,048,976 (4 bytes per pixel of --max-image-pixels 100, plus 1 MiB); raise "
                        f"--max-image-pixels to read it")


def test_load_rows_reads_a_tsv_among_manifests(tmp_path):
    _tsv(tmp_path, [f"1\t{B64}\tQ?\t\ta\tb\t\t\tA\tc\n"])
    assert [r.row_id for r in load_rows(tmp_path)["bench"]] == ["bench/1"]


def test_every_problem_of_every_line_of_two_tsvs_is_named_at_once(tmp_path):
    """A choice TSV and an open one: each bad line's problems (a line of the wrong width, a row id given twice
    among them) in one error, in file and line order, each with the fix for its file's kind of row."""
    _tsv(tmp_path, [f"1\t{B64}\tQ?\t\tcat\tdog\t\t\tA\tc\n",       # 2: good
                    f"2\t{B64}\t\t\tcat\tdog\t\t\tE\tc\n",         # 3: no question, no option E
                    "3\tQ?\n",                                      # 4: two cells
                    f"4\t{B64}\tQ?\t\tcat\tdog\t\t\tB\tc\n",       # 5: good
                    f"1\t{B64}\tQ?\t\tcat\tdog\t\t\tB\tc\n"])      # 6: index 1 again
    _tsv(tmp_path, [f"1\t{B64}\tQ?\t\tc\n", "2\t9\tQ?\tyes\tc\n"], header="index\timage\tquestion\tanswer\tcategory\n",
         name="open.tsv")
    with pytest.raises(RowErrors) as info:
        load_rows(tmp_path)
    assert [(p.path.rsplit("/", 1)[1], p.line, p.field_name) for p in info.value.problems] == [
        ("bench.tsv", 3, "question"), ("bench.tsv", 3, "answer"), ("bench.tsv", 4, "<tsv>"),
        ("bench.tsv", 6, "row_id"), ("open.tsv", 2, "answer"), ("open.tsv", 3, "image")]
    fixes = [p.fix for p in info.value.problems]
    assert fixes[1] == "'answer': the letter of the right option's column (one of A, B, ...)"
    assert fixes[2] == "one row a line, its cells separated by tabs, as many as the header has columns"
    assert fixes[3] == f"give one of the two rows ({tmp_path}/bench.tsv:2, {tmp_path}/bench.tsv:6) another 'index'"
    assert fixes[4] == "'answer': the accepted answer, or a list literal of them (['yes', 'Yes'])"
    assert fixes[5].startswith("'image': a base64 image, a list literal of them, or the index of the row whose")

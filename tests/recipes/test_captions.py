"""Caption rows: the fixture grammar and its truth against scenes, the fixture generator, and both loaders."""

import json

import pytest
from PIL import Image

from laya_robustness.families.lgip.grammar import caption_holds, noun_phrase, parse_mentions, parse_relation
from laya_robustness.recipes.fixture_captions import CAPTION_SET, generate_captions, write_captions
from laya_robustness.loaders.captions import load_captions
from laya_robustness.rows import RowError

from helpers.paths import ROOT

FIXTURE_CAPTIONS = ROOT / "laya_fixtures" / "captions"
SCENE = [
    {"shape": "circle", "colour": "red", "col": 0, "row": 0},
    {"shape": "square", "colour": "blue", "col": 2, "row": 3},
    {"shape": "triangle", "colour": "green", "col": 3, "row": 1},
    {"shape": "triangle", "colour": "green", "col": 1, "row": 2},
]


@pytest.mark.parametrize("text, holds", [
    ("a red circle", True),
    ("two green triangles", True),
    ("a green triangle", False),  # exact count: there are two
    ("three triangles", False),
    ("two triangles", True),
    ("two green shapes", True),
    ("a blue shape", True),
    ("a red circle, a blue square and two green triangles", True),
    ("a red circle and a red square", False),
    ("the picture shows a blue square and a red circle", True),
    ("a red circle above a blue square", True),
    ("a red circle below a blue square", False),
    ("a red circle to the left of a blue square", True),
    ("a blue square to the left of a red circle", False),
    ("a red circle above a green triangle", False),  # two green triangles: the relation needs one
    ("no shapes at all", False),  # no mention: nothing is claimed
])
def test_caption_holds_by_hand(text, holds):
    assert caption_holds(text, SCENE) is holds


def test_parse_mentions_spans_and_relation():
    text = "Two green triangles to the right of a red circle"
    first, second = parse_mentions(text)
    assert (first.count, first.colour, first.shape) == (2, "green", "triangle")
    assert text[slice(*first.det_span)] == "Two" and text[slice(*first.noun_span)] == "triangles"
    assert (second.count, second.colour, second.shape, second.colour_span) == (1, "red", "circle", (38, 41))
    assert parse_relation(text, [first, second]) == "to the right of"
    assert [noun_phrase(1, "yellow", "square"), noun_phrase(3, None, "circle"), noun_phrase(2, "red", None)] == [
        "a yellow square", "three circles", "two red shapes"]


def test_generated_captions_are_true_rows_of_their_scene():
    rows = generate_captions(40, seed=3)
    assert len(rows) == len({r.row_id for r in rows}) >= 120
    by_image = {}
    for r in rows:
        assert (r.primitive, r.question, r.label, r.group_id, r.family) == ("score", "", -1, r.row_id, "orig")
        assert len(r.options) == 1 and len(r.images) == 1 and r.images[0].size == (64, 64)
        assert caption_holds(r.options[0], r.meta["objects"])
        by_image.setdefault(r.cluster, []).append(r)
    assert all(len({r.options[0] for r in rs}) == len(rs) for rs in by_image.values())  # distinct per image
    assert all(len({id(r.images[0]) for r in rs}) == 1 for rs in by_image.values())  # one image per cluster
    assert len({r.meta["template"] for r in rows}) == 7


def test_generator_is_a_function_of_the_seed():
    a, b, c = generate_captions(10, 0), generate_captions(10, 0), generate_captions(10, 1)
    assert [r.options for r in a] == [r.options for r in b]
    assert all(x.images[0].tobytes() == y.images[0].tobytes() for x, y in zip(a, b))
    assert [r.options for r in a] != [r.options for r in c]


def test_committed_fixture_captions_are_the_generators_output(tmp_path):
    path = write_captions(generate_captions(100, 0), tmp_path)
    committed = FIXTURE_CAPTIONS / f"{CAPTION_SET}.jsonl"
    assert path.read_bytes() == committed.read_bytes()
    for png in sorted((tmp_path / "images" / CAPTION_SET).iterdir()):
        assert png.read_bytes() == (FIXTURE_CAPTIONS / "images" / CAPTION_SET / png.name).read_bytes()


def test_fixture_captions_load_with_their_scene_facts():
    rows = load_captions(FIXTURE_CAPTIONS)[CAPTION_SET]
    generated = generate_captions(100, 0)
    assert [r.row_id for r in rows] == [r.row_id for r in generated]
    assert [r.cluster for r in rows] == [r.cluster for r in generated]
    assert all(r.meta["objects"] == g.meta["objects"] and r.options == g.options for r, g in zip(rows, generated))
    assert all(r.images[0].tobytes() == g.images[0].tobytes() for r, g in zip(rows, generated))


def _image(path, colour):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 6), colour).save(path)


def _coco(tmp_path, annotations=None, images=None):
    _image(tmp_path / "imgs" / "000001.jpg", (255, 0, 0))
    _image(tmp_path / "imgs" / "000002.jpg", (0, 0, 255))
    data = {"images": images or [{"id": 1, "file_name": "000001.jpg"}, {"id": 2, "file_name": "000002.jpg"}],
            "annotations": annotations or [{"id": 10, "image_id": 1, "caption": "A red square."},
                                           {"id": 11, "image_id": 2, "caption": "A blue square. "},
                                           {"id": 12, "image_id": 1, "caption": "Something red."}]}
    path = tmp_path / "captions_val.json"
    path.write_text(json.dumps(data))
    return path


def test_coco_captions_file(tmp_path):
    rows = load_captions(_coco(tmp_path), images_dir=tmp_path / "imgs")["captions_val"]
    assert [r.row_id for r in rows] == ["captions_val/10", "captions_val/11", "captions_val/12"]
    assert [r.options for r in rows] == [("A red square.",), ("A blue square.",), ("Something red.",)]
    assert [r.cluster for r in rows] == ["captions_val/1", "captions_val/2", "captions_val/1"]
    assert rows[0].images[0] is rows[2].images[0] and rows[0].images[0].getpixel((0, 0))[0] > 240
    assert rows[1].meta == {"image_id": 2} and rows[1].primitive == "score" and rows[1].label == -1


@pytest.mark.parametrize("annotations, images, field", [
    ([{"id": 1, "image_id": 1}], None, "annotations[0].caption"),
    ([{"id": 1, "image_id": 1, "caption": "ok"}, {"id": 2, "image_id": 7, "caption": "x"}], None,
     "annotations[1].image_id"),
    ([{"id": 1, "image_id": 1, "caption": "  "}], None, "annotations[0].caption"),
    ([{"id": 1, "image_id": 1, "caption": "ok"}], [{"id": 1, "file_name": "missing.jpg"}], "images[0].file_name"),
    ([{"id": 1, "image_id": 1, "caption": "ok"}], [{"file_name": "000001.jpg"}], "images[0].id"),
    ([{"id": 1, "image_id": 1, "caption": "a"}, {"id": 1, "image_id": 2, "caption": "b"}], None, "row_id"),
])
def test_coco_errors_name_file_entry_and_field(tmp_path, annotations, images, field):
    path = _coco(tmp_path, annotations, images)
    with pytest.raises(RowError) as err:
        load_captions(path, images_dir=tmp_path / "imgs")
    assert err.value.field_name == field and str(path) in str(err.value)


def test_jsonl_forms_and_images_dir(tmp_path):
    _image(tmp_path / "pics" / "a.png", (255, 0, 0))
    _image(tmp_path / "pics" / "b.png", (0, 255, 0))
    lines = [{"image": "a.png", "captions": ["a red square", "something red"], "image_id": "A"},
             {"image": "b.png", "caption": "a green square", "row_id": "mine/1", "meta": {"source": "hand"}},
             {"image": "b.png", "caption": "green"}]
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    rows = load_captions(path, images_dir=tmp_path / "pics")["set"]
    assert [r.row_id for r in rows] == ["set/000001-0", "set/000001-1", "mine/1", "set/000003"]
    assert [r.cluster for r in rows] == ["set/A", "set/A", "set/b.png", "set/b.png"]
    assert rows[2].meta == {"source": "hand", "image_id": "b.png"} and rows[2].images[0] is rows[3].images[0]


@pytest.mark.parametrize("line, field", [
    ("{not json", "<json>"),
    ('["a list"]', "<json>"),
    ('{"caption": "x"}', "image"),
    ('{"image": "a.png"}', "caption"),
    ('{"image": "a.png", "caption": "x", "captions": ["y"]}', "caption"),
    ('{"image": "a.png", "captions": []}', "captions"),
    ('{"image": "a.png", "captions": ["ok", 3]}', "captions[1]"),
    ('{"image": "a.png", "caption": "x", "meta": [1]}', "meta"),
    ('{"image": "nope.png", "caption": "x"}', "image"),
    ('{"image": "a.png", "captions": ["x"], "row_id": "r"}', "row_id"),
])
def test_jsonl_errors_name_file_line_and_field(tmp_path, line, field):
    _image(tmp_path / "a.png", (1, 2, 3))
    path = tmp_path / "bad.jsonl"
    path.write_text('{"image": "a.png", "caption": "fine"}\n' + line + "\n")
    with pytest.raises(RowError) as err:
        load_captions(path)
    assert (err.value.line, err.value.field_name) == (2, field)
    assert str(err.value).startswith(f"{path}:2: field '{field}'")


def test_a_directory_loads_every_caption_file_by_stem(tmp_path):
    _coco(tmp_path)
    (tmp_path / "imgs" / "000001.jpg").rename(tmp_path / "000001.jpg")
    (tmp_path / "imgs" / "000002.jpg").rename(tmp_path / "000002.jpg")
    _image(tmp_path / "a.png", (1, 2, 3))
    (tmp_path / "extra.jsonl").write_text('{"image": "a.png", "caption": "fine"}\n')
    assert {k: len(v) for k, v in load_captions(tmp_path).items()} == {"captions_val": 3, "extra": 1}
    with pytest.raises(FileNotFoundError):
        load_captions(tmp_path / "absent")

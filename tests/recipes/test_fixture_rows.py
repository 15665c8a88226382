"""The committed fixture rows are exactly what the committed generator draws."""

from pathlib import Path

from laya_robustness.recipes.fixture_rows import SET_NAMES, generate_rows, write_fixture_rows
from laya_robustness.loaders import load_rows

COMMITTED = Path(__file__).resolve().parents[2] / "laya_fixtures" / "rows"


def test_regenerating_the_rows_gives_the_committed_files(tmp_path):
    write_fixture_rows(tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(COMMITTED) for p in COMMITTED.rglob("*") if p.is_file())
    assert made == committed and len(made) > 5
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (COMMITTED / rel).read_bytes(), rel


def test_every_set_has_enough_rows_and_shared_images():
    rows = load_rows(COMMITTED)
    assert sorted(rows) == sorted(SET_NAMES)
    for name, set_rows in rows.items():
        clusters = {r.cluster for r in set_rows}
        assert len(set_rows) >= 200, name
        assert len(clusters) < len(set_rows), f"{name}: no image carries two questions"
        assert max(sum(r.cluster == c for r in set_rows) for c in clusters) <= 4
    assert all(r.context for r in rows["context_choice"])


def test_training_rows_come_from_another_seed():
    val = {(r.question, r.images[0].tobytes()) for r in generate_rows("colour_choice", 60, seed=0)}
    train = {(r.question, r.images[0].tobytes()) for r in generate_rows("colour_choice", 60, seed=1)}
    assert val and train and len(val & train) < len(val) // 4

"""The loaders' options: documented formats, and a ValueError with a clear message for anything else."""

import pytest

from laya_robustness.loaders.settings import (
    DEFAULT_MAX_IMAGE_PIXELS, LoadSettings, parse_allow_outside_data, parse_data_map, parse_max_image_pixels,
)
from laya_robustness.pytest_plugin.pytest_options import OPTIONS


def test_data_map():
    assert parse_data_map("question=prompt, options=choices,label=answer_idx") == {
        "question": "prompt", "options": "choices", "label": "answer_idx"}
    assert parse_data_map("") == parse_data_map("none") == parse_data_map(" None ") == {}
    assert parse_data_map("answers=,images=image") == {"answers": "", "images": "image"}
    assert parse_data_map("group_id=image_id,cluster=image_id") == {"group_id": "image_id", "cluster": "image_id"}


@pytest.mark.parametrize("text, message", [
    ("question", "'question' is not field=column (e.g. question=prompt,options=choices)"),
    ("=prompt", "'=prompt' is not field=column (e.g. question=prompt,options=choices)"),
    ("questoin=prompt", "unknown row field 'questoin'; did you mean 'question'? (fields: row_id, "
                        "dataset, group_id, cluster, images, question, options, label, primitive, answers, context, "
                        "category, meta)"),
    ("label=a,label=b", "field 'label' is mapped twice"),
])
def test_data_map_errors(text, message):
    with pytest.raises(ValueError) as info:
        parse_data_map(text)
    assert str(info.value) == message


def test_max_image_pixels():
    assert parse_max_image_pixels("40000000") == parse_max_image_pixels("40M") == parse_max_image_pixels("40_000_000")
    assert parse_max_image_pixels("2.5m") == 2_500_000 and parse_max_image_pixels(" 1 ") == 1


@pytest.mark.parametrize("text", ["abc", "0", "-5", "1.5", "0.0000001M", "", "40 M", "1e6", "inf"])
def test_max_image_pixels_errors(text):
    with pytest.raises(ValueError) as info:
        parse_max_image_pixels(text)
    assert str(info.value) == (f"{text!r} is not a positive pixel count (an integer such as "
                               f"40000000, or megapixels such as 40M)")


def test_allow_outside_data():
    assert [parse_allow_outside_data(t) for t in ("yes", "TRUE", "on", "1")] == [True] * 4
    assert [parse_allow_outside_data(t) for t in ("no", "False", "off", "0")] == [False] * 4
    with pytest.raises(ValueError, match=r"^'maybe' is not yes or no$"):
        parse_allow_outside_data("maybe")


def test_the_plugin_options_defaults_parse_to_the_default_settings():
    defaults = {o.flag: o.default for o in OPTIONS}
    settings = LoadSettings.from_text(defaults["--data-map"], defaults["--max-image-pixels"],
                                      defaults["--allow-outside-data"])
    assert settings == LoadSettings() and settings.max_image_pixels == DEFAULT_MAX_IMAGE_PIXELS
    assert settings.max_image_bytes == 4 * 40_000_000 + 2**20


def test_settings_validate_their_fields():
    with pytest.raises(ValueError, match="max_image_pixels: expected a positive int, got 0"):
        LoadSettings(max_image_pixels=0)
    with pytest.raises(ValueError, match="data_map: 'prompt'='question' is not a row field mapped to a column name"):
        LoadSettings({"prompt": "question"})

"""Limits files (limits.toml) the tests' gate runs are judged against."""

#: Limits the fake oracle scorer passes on the gate project's two small datasets.
PASSING_LIMITS = """
version = 1
[families.orig]
min_acc = 0.3
[families.option_order]
max_flip = 0.9
max_drop = 0.5
[families.image_shuffle]
min_gap = 0.05
"""

#: One limit that no run crosses (orig's accuracy at least 0): runs judged on them pass whatever was scored.
NOTHING_FAILS_LIMITS = "version = 1\n[families.orig]\nmin_acc = 0.0\n"

"""A summary's cells looked up where their family's block holds them."""

from typing import Any, Mapping


def summary_cell(summary: Mapping[str, Any], family: str, dataset: str) -> Mapping[str, Any]:
    """The cell of (family, dataset), looked up in the block its family is declared in.

    Raises KeyError naming the family, dataset and block when the summary has no such cell.
    """
    from laya_robustness.summary import block_of

    block = block_of(family)
    try:
        return summary[block][family][dataset]
    except KeyError:
        raise KeyError(f"summary has no cell {family}/{dataset} (looked in {block!r})") from None

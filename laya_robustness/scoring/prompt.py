"""How a row is shown to a generative VLM: its options in the prompt, the option text as the answer.

A row's logit for an option is the log-likelihood of ``" " + option + <eos>`` as the
assistant's answer after the chat-templated prompt (no space when the prompt already ends
in whitespace, e.g. a newline after the assistant header). The prompt is tokenized once
and each option's ids are appended to it, so the prompt ids are the same for
every option and no BPE merge crosses the boundary.
"""

from __future__ import annotations

from laya_robustness.rows import LETTERS, Row


def user_text(row: Row) -> str:
    """Context (if any), question, then the options in display order.

    A ``choice`` row lists its options as "A. red" lines; a ``noul`` row ends with
    "Answer no or yes." (its two options in display order); a row without options
    (an open answer for ``generate``) ends with the question.
    """
    lines = [row.context] if row.context else []
    lines.append(row.question)
    shown = row.shown_options
    if not shown:
        pass
    elif row.primitive == "noul":
        lines.append(f"Answer {shown[0]} or {shown[1]}.")
    else:
        lines += [f"{LETTERS[i]}. {text}" for i, text in enumerate(shown)]
    return "\n".join(lines)


def chat_messages(row: Row) -> list[dict]:
    """The row as one user turn: one image entry per image, then the text."""
    content = [{"type": "image"} for _ in row.images]
    content.append({"type": "text", "text": user_text(row)})
    return [{"role": "user", "content": content}]


def answer_text(option: str, eos_token: str, space: str = " ") -> str:
    """The assistant answer whose log-likelihood is an option's logit: ``space + option + end token``."""
    return f"{space}{option}{eos_token}"

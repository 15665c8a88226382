"""Textual variants written by a language model, as the stability study made them: rephrasings of every question
and translations asking for an English answer (``python -m laya_robustness variants rephrase|translate``).

``prompts`` holds the prompts, ``generator`` the Hugging Face chat model behind them, ``checks`` what every
text must pass, ``tasks`` what each task asks and keeps, ``pipeline`` the resumable run and its files and
``command`` the command line's entry. The files it writes are the ``--rephrasings`` and ``--translations``
files of the gate (``run.inputs.run_inputs.attach_user_variants``)."""

"""What a run writes and where: its data reports made from the outcome (``data_files``), their meta blocks
(``meta``) and the lock of the report folder (``lock``)."""

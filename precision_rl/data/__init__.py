"""Dataset recipes (``recipes``), their sources (``sources``), on-disk layout (``store``) and the sanity-set rebuild."""

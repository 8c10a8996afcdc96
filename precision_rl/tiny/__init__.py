"""The tiny scale's instrument: the shipped 3M-parameter base model (its recipe, tokenizer and checksums), the
generated arithmetic problems and the committed tiny sanity set drawn from them; verl trains it like any model."""

"""Data preparation: raw files (JSON Lines, Parquet, text, a Hugging Face ``datasets`` directory)
tokenized with the model's own tokenizer, packed into one token stream per split and written as a
prepared directory that ``components/data.py``'s ``PreparedSource`` memory-maps.

Modules: ``options`` (what to prepare, errors naming the field and flag), ``readers`` (one per
input format), ``tokenizer`` (tokenizer.json, special tokens, fingerprint), ``chat`` (chat
template and answer-token masks), ``writer`` (packing, the split files, meta.json, atomic
publication), ``prepare`` (the entry point: ``python -m phalanx_runtime.data.prepare`` and the
training job's ``data.prepare`` step).
"""

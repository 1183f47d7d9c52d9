"""Evaluating variants on math benchmarks with vLLM, one concern a module:

- ``settings``: the engine and sampling settings (pydantic), hashed into evaluation keys;
- ``benchmarks``: the bundled benchmarks, loading a ``test.jsonl``, fetching from the Hub;
- ``prompts``: the instruction and the prompt format recorded with every result;
- ``grading``: last-\\boxed extraction and math-verify equivalence (the math-verify owner);
- ``engine``: the vLLM engine and its generations (the vLLM owner);
- ``scoring``: one benchmark for one variant, resumably, with pass@k and maj@k;
- ``tables``: accuracy, diagnostics, retention and solved/lost tables;
- ``dtype_choice``: ``engine.dtype: auto`` resolved for one transition (bf16 where its update survives it);
- ``pipeline``: ``run_evaluation``, which runs them for the variants of a stored transition.

Nothing is re-exported here: import each name from the module that owns it.
"""

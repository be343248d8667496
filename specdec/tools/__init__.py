"""Offline tools: the code that produces specdec's assets, never run while generating.

Layer-skip set search, PPD prompt training and hardware profiling, draft-vocabulary token ranking and
the bundled default model's training recipe live here, apart from the drafters and the zoo they write
files for, so that importing specdec for generation never pulls them in. Tools import the runtime
packages; the runtime never imports a tool (tests/test_layout.py checks it). Each tool is a `specdec`
subcommand (see `specdec.cli.SUBCOMMANDS`) or a `python -m specdec.tools...` script.
"""

"""The sections of ``benchmarks/cuda_check.py`` (the entry point), one module each or a few related ones:
``common`` (report, inputs, the HF / bertkit pair), ``parity`` (parity, sdpa), ``inference``, ``training``, ``ddp``,
``finetune``, ``families``, ``pretrain_cli`` (pretrain_objectives, determinism). Imported with ``benchmarks/`` on
``sys.path`` (the entry point puts it there), as the section modules import ``timing`` and each other."""

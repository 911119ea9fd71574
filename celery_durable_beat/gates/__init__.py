"""Beat's gates: the decisions the leader's round takes around a publish (SPEC §2, §4, §6).

They run in the beat process and see the runs port only (``runs/base.py``): what workers record
of their runs is what the gates decide on. ``base.py`` is the one port the round calls (``Gate``)
and the open gate; ``round_gate.py`` composes the decisions, one module each: ``overlap.py``
(``skip`` / ``buffer_one`` / ``replace``), ``unknown_tasks.py`` (ticks no worker knew),
``failing_streaks.py`` (``pause_on_failure``), ``live_queues.py`` (``require_worker``).

Nothing is imported here: the round imports ``gates.base`` only, and must not load the others.
"""

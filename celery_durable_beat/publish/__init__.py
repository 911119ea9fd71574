"""Publishing ticks to the broker: one module per transport path behind the ports of ``base.py``.

- ``base.py``: the ports the round uses (``Publisher``, ``PublishSession``) and ``Confirms``,
  with the contract as numbered rules;
- ``celery_publisher.py``: ``CeleryPublisher``, the production publisher, which picks a session
  per transport;
- ``send_task.py``: the generic Celery path (``CelerySession``, every tick through ``send_task``);
- ``redis_template.py``: the templated path on kombu's Redis transport (``TemplatedRedisSession``);
- ``amqp_confirms.py``: publisher confirms on RabbitMQ (``AmqpConfirms``);
- ``through_beat.py``: every tick through stock beat's ``apply_entry`` once an integration
  (Sentry, Datadog) wrapped it (``EntrySession``), with the tick's ``ScheduleEntry`` from
  ``beat_entry.py`` and the detection of wrappers in ``wrappers.py``;
- ``capturing.py``: ``CapturingPublisher``, the in-memory double.

The message's own shape is ``message.py``'s, its Celery keyword arguments ``celery_message.py``'s.
Nothing is re-exported here: import from the module, so importing the double never loads kombu.
"""

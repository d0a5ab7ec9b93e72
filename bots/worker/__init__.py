"""One persona in one channel: what it knows (``state``), what it decides (``step``, pure), and the I/O that feeds
the step and carries out its actions (``channel``)."""

"""The reply log: a reply is generated once, and every delivery of it reads the log.

``interface`` names a reply and says what a log does; ``memory`` is the in-process log,
``redis_log`` (with ``redis_reply``, ``followers``, ``notify`` and the Lua of
``scripts``) the one replicas share in Redis; ``states`` is a reply's lifecycle, the one
table both logs obey.
"""

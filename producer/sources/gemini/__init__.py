"""Live Gemini: the provider's protocol and the producer's I/O around it.

Only the producer talks to the provider, so all of it lives here:

* ``protocol`` (pure): the request body, the HTTP-status -> reason mapping,
  the lab's adapter and the one ``events -> frames`` loop (``ProviderStream``);
* ``sse`` (pure): the strict Server-Sent Events parser;
* ``codes`` (pure): which registered code a finishReason or an error status is;
* ``settings`` (pure): what every call shares, and the base URLs the key may go to;
* ``source``: the httpx source: a live call bound, reserved, sent, refused or opened;
* ``call_ledger``: a call's moves in the budget ledger (``producer.budget``): reserved,
  marked sending, recorded exactly once;
* ``plan``: an open call's reply, its events read into frames through ``protocol``;
* ``call_span``: a call's span, with tracing on;
* ``capture``: the evidence of each live call (``--record``);
* ``convert``: a captured run to a hashed recording (``python -m producer.convert_capture``).

The pure modules do no I/O (no grpc, asyncio, httpx, sockets, files or clocks).
"""

"""Live Gemini: the provider's protocol and the producer's I/O around it.

Only the producer talks to the provider, so all of it lives here:

* ``protocol`` (pure): the request body, the HTTP-status -> reason mapping,
  the lab's adapter and the one ``events -> frames`` loop (``ProviderStream``);
* ``sse`` (pure): the strict Server-Sent Events parser;
* ``codes`` (pure): which registered code a finishReason or an error status is;
* ``source``: the httpx source that streams a live call through ``protocol``;
* ``ledger``: the budget ledger every paid call reserves against;
* ``capture``: the evidence of each live call (``--record``);
* ``convert``: a captured run to a hashed recording (``python -m producer.convert_capture``).

The pure modules do no I/O (no grpc, asyncio, httpx, sockets, files or clocks).
"""

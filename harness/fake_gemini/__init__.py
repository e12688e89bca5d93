"""A real loopback HTTP/1.1 server that speaks the Gemini REST streaming protocol.

For tests of a Gemini adapter: no mocks, a real socket. Standard library only
(asyncio streams, a hand-written HTTP/1.1 server) so that every failure mode
(slow drip, reset mid-body, a body that ends early) is under the test's control.

Use in-process (``server``)::

    fake = FakeGemini(api_key="test-key")
    port = await fake.start()              # 127.0.0.1, a free port
    ... POST f"{fake.base_url}/v1beta/models/gemini-3.1-flash-lite:streamGenerateContent?alt=sse"
    await fake.wait_idle()                 # every connection handled
    fake.log[-1]["client_disconnected"]
    await fake.stop()

or as a process: ``python -m harness.fake_gemini --port 0`` (``__main__``).

Scripts are chosen by the model name in the path (``scripts.SCRIPTS``, and
``scripts.CHAT_MODELS``): ``gemini-3.1-flash-lite`` answers the four development cases of
the published Gemini run; every ``fake-*`` model is a failure script, and each
``fake-chat-*`` one answers a chat request with a turn. Any other model name gets 404
NOT_FOUND.

One module per job:

* ``protocol``: Gemini's protocol as the fake speaks it, each fact with where it was
  found: a request's turn, an event's and an error body's spelling, Google's heads;
* ``checks``: a request routed, authenticated and validated, or refused as Google does;
* ``scripts``: what each model answers (the published cases, the failure scripts) and
  the usage its reply reports;
* ``chat_scripts``: what each ``fake-chat-*`` model answers a chat request;
* ``http1``: HTTP/1.1 on one connection, by hand: a request read, an answer written;
* ``server``: ``FakeGemini``, which plays a request's script on its connection and logs it;
* ``__main__``: the command line.
"""

"""The client: one request out, one timed stream in.

In: a :class:`loadgen.request.GenRequest` and a :class:`Target` (URL, protocol, headers).
Out: a :class:`loadgen.record.RequestRecord` — the kernel receive stamp and token count of
every chunk, the finish reason or the failure's reason.

- ``stream``: the aiohttp session, timeouts and the read loop that stamps chunks; ``StreamClient.prepare``
  builds a request's bytes ahead of its send (``Prepared``, which ``stream`` takes);
- ``sse``: the server-sent-events parser; ``protocols/``: one adapter per endpoint;
- ``tokencount``: token counts for servers that do not send them; ``loops``: the event loops;
- ``target``: where requests go.
"""

"""One attempt at the httpx/httpcore boundary: its request, its send, its trace.

``copy`` (the attempt's request for its replica), ``urls`` and ``request_fast`` (the
URL and the header and body of that copy), ``trace`` (when it leaves the pool's queue,
its trimmed timeouts), ``send`` (the attempt through the inner transport) and
``first_byte`` (a race that ends at the first body byte).

Strictly private.
"""

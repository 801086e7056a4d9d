"""Certificates: what an owner hands to a kennel or a border check (contract section 16).

The parts that the `/v1/pet-certificates` resource and the public endpoint are made of, each standing alone:

- `facts`: the public JSON, one model of the facts that every form is made from;
- `signing`: the compact JWS of the facts and the key set that verifies it;
- `document`: the PDF; `page`: the HTML page and the Content-Security-Policy it is served with;
- `addresses`: the per-address rate limit of the public paths and whose address a request is;
- `links`: the link tokens, how they are kept and how they stay out of the logs.

Importing the package imports none of them: the PDF's library and fonts load only where a PDF is made.
"""

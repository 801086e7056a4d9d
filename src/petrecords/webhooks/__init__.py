"""Webhooks (contract, section 17): each change an owner may see, delivered to their URL as a signed HTTP POST.

Its parts, each with its own rules: `signing` (the Standard Webhooks signature, and its check as a receiver makes
it), `targets` (which URLs and addresses a webhook may deliver to), `delivery` (one attempt over HTTP), `schedule`
(when a failed delivery is tried again, and when a webhook is disabled) and `events` (which changes a webhook
selects)."""

"""A fake network: urllib's opener answering from a list, for the fetch tests."""

from __future__ import annotations

import urllib.request


def serve(monkeypatch, responses: list) -> list[str]:
    """Make urlopen answer with `responses` in turn (an exception is raised); return the URLs asked."""
    asked: list[str] = []

    def urlopen(url, timeout=None):
        asked.append(url)
        answer = responses[min(len(asked), len(responses)) - 1]
        if isinstance(answer, BaseException):
            raise answer
        return answer()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return asked

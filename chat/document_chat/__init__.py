"""Document chat: ask about one section of a document, or have it rewritten.

`workflow` runs the sixteen nodes (validate → intent → query → recall → rerank → gate →
answer or modify skill) and emits the eleven stream events; `api` serves it as
`POST /api/document-chat` (JSON or SSE); `views` is the editor page; `proposals` accepts
a rewrite as a new version of the document.
"""

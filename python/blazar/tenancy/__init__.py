"""Who may do what, how much, and in which order: API keys (``keys``), per-key quotas (``quotas``) and admission
through the Cython scheduler (``admission``). The gateway's ``Gate`` applies them to requests.
"""

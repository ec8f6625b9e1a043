"""corvid-actors: supervised Pykka actors hosting long-running LLM agent sessions."""

"""corvid-actors: supervised Pykka actors hosting long-running LLM agent sessions.

As a library, corvid-actors logs nothing until the application asks for its logs
(loguru's convention for libraries): ``from loguru import logger;
logger.enable("corvid_actors")``. The ``corvid-actors`` command line and the daemon
enable them.
"""

from loguru import logger

logger.disable("corvid_actors")

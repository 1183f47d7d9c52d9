"""How every variant is prompted: the instruction, and the prompt format recorded with every result."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..config import stable_hash

DEFAULT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

# The files that fix how a prompt is written and when an answer stops.
PROMPT_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)


def prompt_format(folder: Path, template: str, instruction: str) -> dict:
    """The prompt format of a transition's evaluation: the post model's tokenizer, chat template and
    generation config (their sha256), the template and the instruction. Recorded with every result."""
    folder = Path(folder)
    files = {}
    for name in PROMPT_FILES:
        p = folder / name
        if p.is_file():
            files[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    chat = None
    if (folder / "chat_template.jinja").is_file():
        chat = (folder / "chat_template.jinja").read_text()
    elif (folder / "tokenizer_config.json").is_file():
        try:
            chat = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
        except json.JSONDecodeError:
            chat = None
    fmt = {
        "from": str(folder),
        "template": template,
        "instruction": instruction,
        "files": files,
        "chat_template_sha256": hashlib.sha256(str(chat).encode()).hexdigest() if chat else None,
    }
    fmt["digest"] = stable_hash({k: v for k, v in fmt.items() if k != "from"}, 16)
    return fmt

"""Chat answers the pictures people send as transformers does, token for token.

For every converted family, each picture of the set people send (a JPEG photo, a phone
photo stored sideways, a size at a rounding tie, a 6000×4000 camera JPEG, a palette PNG
with transparency, a 16-bit PNG, a CMYK JPEG) is sent through chat, and the greedy
answer is compared with transformers' own: the checkpoint's processor on the picture as
`load_image` gives it, then `generate`. Nothing of the runtime's inputs reaches the
reference side.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mmforge.backend import pictures
from mmforge.backend.attachments import IMAGE
from mmforge.backend.chat import ChatSession, GenerationOptions
from mmforge.backend.verify import hf_reference
from tests.backend.families import TESTED
from tests.conftest import approximated
from tests.images import user_pictures

KINDS = ["jpeg", "exif", "tie", "large", "palette", "png16", "cmyk"]
TOKENS = 8


@pytest.fixture(scope="module")
def sent(tmp_path_factory):
    return user_pictures(tmp_path_factory.mktemp("photos"))


@pytest.mark.slow
@pytest.mark.parametrize("family", TESTED)
def test_chat_answers_each_photo_with_transformers_tokens(family, tiny, package, sent):
    from mmforge.backend.checkpoint import Checkpoint

    folder = package(family)
    # As verify reads it: an approximated package's reference takes its overrides.
    checkpoint = Checkpoint.read(Path(tiny(family)), approximate=approximated(family))
    model = hf_reference.load_model(checkpoint)
    tokenizer = hf_reference.load_tokenizer(checkpoint)
    session = ChatSession(folder)
    eos = set(session.info.eos_token_ids)
    messages = hf_reference.messages_for("Describe this.", 1, 0)
    seen = set()
    for kind in KINDS:
        session.new_conversation()
        attachments = session.prepare_attachments([(sent[kind], IMAGE)])
        turn = session.send("Describe this.", attachments, GenerationOptions(max_new_tokens=TOKENS))
        own = hf_reference.prepare(
            checkpoint, messages, [pictures.load(sent[kind])], [], tokenizer=tokenizer
        )
        assert session.context_ids(1) == own.input_ids, f"{kind}: the prompt's ids differ"
        theirs = hf_reference.greedy_generate(model, own, TOKENS)
        ours = [t for t in turn.token_ids if t not in eos]
        assert ours == [t for t in theirs if t not in eos], kind
        seen.add(tuple(ours))
    assert len(seen) >= 3, "answers that never change with the picture would prove nothing"

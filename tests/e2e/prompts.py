"""Prompts for the llama.cpp end-to-end checks.

COPY prompts make the output repeat text that is already in the prompt, so an n-gram
drafter finds matches and most drafts are accepted. CREATIVE prompts ask the base
model for open text; sampled at temperature 0.8 they rarely repeat the prompt.
"""

_PASSAGES = [
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a can of oil "
    "and a folded cloth. He wiped the great lens until it shone, trimmed the wick, and wrote the "
    "wind speed and the state of the sea into a leather logbook that his grandfather had started.",
    "def merge_sorted(left, right):\n    result = []\n    i = j = 0\n    while i < len(left) and "
    "j < len(right):\n        if left[i] <= right[j]:\n            result.append(left[i])\n"
    "            i += 1\n        else:\n            result.append(right[j])\n            j += 1\n"
    "    result.extend(left[i:])\n    result.extend(right[j:])\n    return result\n",
    "Step one: preheat the oven to two hundred degrees. Step two: mix the flour, the sugar and "
    "the salt in a large bowl. Step three: rub in the cold butter until the mixture looks like "
    "breadcrumbs. Step four: add the milk slowly and bring the dough together with a knife.",
    "Article 4. Every member shall keep a written record of each meeting, including the date, "
    "the names of those present, the motions proposed, the result of every vote, and any "
    "objection raised by a member who asks for it to be recorded in the minutes.",
]

COPY_PROMPTS = [
    f"Copy the text below exactly, word for word.\n\nText:\n{p}\n\nCopy:\n{p[:40]}" for p in _PASSAGES
]

CREATIVE_PROMPTS = [
    "The fox found the key on the first morning of the thaw, half buried in the snow beside the old mill. It",
    "Nobody in the floating city remembered why the markets opened at midnight, but every trader knew that",
    "My grandmother kept a tin of buttons on the kitchen shelf, and each button had a story. The brass one",
    "When the last train left the valley, the stationmaster locked the ticket office and walked up the hill,",
]

# Chat messages for /v1/chat/completions (rendered by llama.cpp's built-in gemma template).
COPY_CHAT = [{"role": "user", "content": COPY_PROMPTS[0]}]
CREATIVE_CHAT = [{"role": "user", "content": "Tell me a short story about a fox and a strange key."}]

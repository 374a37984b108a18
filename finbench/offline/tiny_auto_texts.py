"""Chat templates and special tokens of the architectures the generic family is tested on, written
from each released checkpoint's documented prompt format (the turn markers, image placeholders and
thinking switch of its chat template), reduced to what a benchmark conversation uses: a system
turn, user turns of images and text, assistant turns and the generation prompt. No tools.
"""

from __future__ import annotations

# Gemma 4 (google/gemma-4-*-it): <|turn>role … <turn|>; the assistant role is "model"; thinking is
# switched on by <|think|> at the head of the system turn, and the model reasons in
# <|channel>thought … <channel|> before its answer; images are <|image|> placeholders.
GEMMA4_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set system = messages[0] if messages[0]['role'] == 'system' else none %}"
    "{%- if enable_thinking or system %}<|turn>system\n{% if enable_thinking %}<|think|>{% endif %}"
    "{%- if system %}{% if system['content'] is string %}{{ system['content'] | trim }}{% else %}"
    "{% for item in system['content'] %}{% if item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}{% endif %}<turn|>\n{% endif %}"
    "{%- for message in messages %}{% if message['role'] != 'system' %}"
    "<|turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<|image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}{% endif %}"
    "<turn|>\n{% endif %}{% endfor %}"
    "{%- if add_generation_prompt %}<|turn>model\n{% endif %}"
)
GEMMA4_SPECIAL = ("<pad>", "<eos>", "<bos>", "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>",
                  "<|image>", "<image|>", "<|image|>", "<|audio>", "<audio|>", "<|audio|>")
GEMMA4_NAMED = {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
                "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>"}

# GLM-4.6V (zai-org/GLM-4.6V, GLM-4.5V): [gMASK]<sop>, <|system|> / <|user|> / <|assistant|>
# turns, images as <|begin_of_image|><|image|><|end_of_image|>; enable_thinking=false closes an
# empty "\n<think></think>" block after the generation prompt, otherwise the model opens it itself.
GLM46V_CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}"
    "<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>"
    "{%- if enable_thinking is defined and not enable_thinking %}\n<think></think>{% endif %}{% endif %}"
)
GLM46V_SPECIAL = ("<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                  "<|assistant|>", "<|observation|>", "<|begin_of_image|>", "<|end_of_image|>",
                  "<|begin_of_video|>", "<|end_of_video|>", "<|image|>", "<|video|>", "<think>", "</think>",
                  "<|begin_of_box|>", "<|end_of_box|>")

# ChatML, as Qwen-based checkpoints (LLaVA-OneVision-Qwen2, MiniCPM-V 4.6) write it
_CHATML_TURNS = (
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}IMAGE"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
)

# LLaVA-OneVision (llava-hf/llava-onevision-qwen2-*-ov-hf): ChatML with "<image>\n" placeholders
LLAVA_ONEVISION_CHAT_TEMPLATE = _CHATML_TURNS.replace("IMAGE", "<image>\n") + (
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAVA_ONEVISION_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>")

# MiniCPM-V 4.6 (openbmb/MiniCPM-V-4.6): ChatML (a Qwen3.5 language model), one <|image_pad|> per
# image (the processor writes <image_id>, <image> … </image> and the slices around it), Qwen3's
# enable_thinking switch (off: an empty closed block)
MINICPMV46_CHAT_TEMPLATE = _CHATML_TURNS.replace("IMAGE", "<|image_pad|>\n") + (
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
MINICPMV46_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "</image>", "<ref>", "</ref>",
                      "<box>", "</box>", "<quad>", "</quad>", "<point>", "</point>", "<slice>", "</slice>",
                      "<image_id>", "</image_id>", "<unit>", "</unit>", "<think>", "</think>", "<|image_pad|>",
                      "<|video_pad|>")
MINICPMV46_NAMED = {"image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "image_start_token": "<image>",
                    "image_end_token": "</image>", "slice_start_token": "<slice>", "slice_end_token": "</slice>",
                    "image_id_start_token": "<image_id>", "image_id_end_token": "</image_id>"}

# Llama 4 (meta-llama/Llama-4-Scout-17B-16E-Instruct): <|header_start|>role<|header_end|>\n\n … <|eot|>
LLAMA4_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages %}<|header_start|>{{ message['role'] }}<|header_end|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<|image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}{% endif %}<|eot|>{% endfor %}"
    "{%- if add_generation_prompt %}<|header_start|>assistant<|header_end|>\n\n{% endif %}"
)
LLAMA4_SPECIAL = ("<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad|>", "<|header_start|>",
                  "<|header_end|>", "<|eom|>", "<|eot|>", "<|image_start|>", "<|image_end|>", "<|patch|>",
                  "<|tile_x_separator|>", "<|tile_y_separator|>", "<|image|>")

# Mistral Small 3.1 / 3.2 (mistralai/Mistral-Small-3.1-24B-Instruct-2503, Mistral3 architecture):
# <s>[SYSTEM_PROMPT]…[/SYSTEM_PROMPT][INST]…[/INST], images as [IMG]
MISTRAL3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}[SYSTEM_PROMPT]{% elif message['role'] == 'user' %}[INST]{% endif %}"
    "{%- if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}[IMG]"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{%- if message['role'] == 'system' %}[/SYSTEM_PROMPT]{% elif message['role'] == 'user' %}[/INST]"
    "{% else %}{{ eos_token }}{% endif %}{% endfor %}"
)
MISTRAL3_SPECIAL = ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]",
                    "[IMG_BREAK]", "[IMG_END]")

# SmolVLM (HuggingFaceTB/SmolVLM2-*-Instruct): <|im_start|>User: … <end_of_utterance>\nAssistant:
SMOLVLM_CHAT_TEMPLATE = (
    "<|im_start|>"
    "{%- for message in messages %}{{ message['role'] | capitalize }}"
    "{%- if message['content'] is string %}: {{ message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    "{% for item in message['content'] %}{% if item['type'] == 'image' %}<image>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}<end_of_utterance>\n"
    "{% endfor %}{%- if add_generation_prompt %}Assistant:{% endif %}"
)
SMOLVLM_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<fake_token_around_image>", "<image>",
                   "<global-img>", "<end_of_utterance>", "<video>")

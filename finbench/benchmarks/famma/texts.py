"""FAMMA's texts: the official prompts byte for byte, our constrained template, labels and limits."""

from __future__ import annotations

import re

from finbench.core.types import MULTI, OPEN, SINGLE

NAME = "famma"
HUB_ID = "weaverbirdllm/famma"
HUB_SPLIT = "release_basic"
# the score's breakdowns: the record's labels, then the analyzer's derived tables (the columns the
# scorer's `group_frame` derives, scoring/famma.py; tests/test_registry_torch_free.py checks they agree)
DERIVED_GROUP_COLUMNS = ("arithmetic", "language×difficulty", "arithmetic×subfield", "arithmetic×difficulty",
                         "arithmetic×language", "arithmetic×language×difficulty")
GROUP_COLUMNS = ("question_type", "kind", "language", "difficulty", "subfield", *DERIVED_GROUP_COLUMNS)
DOMAIN_FIELD = "subfield"  # the meta field --domain filters on
FORMS = ("hub Arrow/parquet (image structs)", "downloader JSON (relative image paths)",
         "early JSON (base64 images, options as a python-list string)")
PROTOCOLS = ("constrained", "official")
METRICS = "accuracy: consolidated, arithmetic / non-arithmetic, by subfield, difficulty, language, language×difficulty"

N_IMAGES = 7
MULTIPLE_CHOICE = "multiple-choice"
OPEN_QUESTION = "open question"
MISSING_ANSWERS = ("", "nan", "none", "null")  # how the live set (and pandas) spell "no gold answer"
PLACEHOLDER = re.compile(r"<image_(\d+)>")

# ---- official protocol (famma_runner/utils/prompt_utils.py QuestionPrompt, JudgePrompt) --------------
# The leading spaces are the template's own indentation: the model sees them.
OFFICIAL_QUESTION_TEMPLATE = """You are a highly knowledgeable financial expert. Please answer the questions in the finance domain. You are given context, images, questions and options.
        The questions are multilingual (either in English, Chinese, or French) and multimodal (containing images as part of the question).  
        
        Question Format:
        - Context: The given financial context.
        - Sub_questions: A list of sub-questions, where each contains:
        id: unique identifier for the sub-question
        type: question type ('multiple-choice' or 'open-ended')
        question: the actual question text
        - Images: Image placeholders like '<image_1>', '<image_2>' refer to accompanying images. If images are mentioned, they will be included alongside the textual context. If no images are provided, answer based solely on the textual context.
        
        Answering Guidelines:
        For each sub_question, provide:        
        - Answer:
            For multiple-choice questions, return the option index A, B, C, D, etc.
            For open-ended questions, provide a concise and precise answer.
        - Explanation: Provide a clear and detailed explanation (maximum 200 words) for your answer in the same language as the question.
        - Explanation Format: Write explanations in clear, natural language without using special characters or symbols that could interfere with JSON parsing (avoid \\n, \\t, etc.). Keep explanations concise and focused.

        Your response must be in a standard JSON format and should follow this structure:
        ```json
        {
            "<question_id>": {
                "answer": "<answer>",
                "explanation": "<explanation>"
            },
            "<question_id>": {
                "answer": "<answer>",
                "explanation": "<explanation>"
            },
            ...
        }
        ```
        Ensure that the response strictly adheres to JSON syntax without any additional content. 
        Now please answer the following question:
        context: {{context}}
        {{sub_questions}} 
        """
OFFICIAL_JUDGE_TEMPLATE = """You are a highly knowledgeable expert and teacher in the finance domain. 
        You are reviewing a student's answers to financial questions. 
        The questions are multilingual (either in English, Chinese, or French) and multimodal (containing images as part of the question). '<image_1>, <image_2> ...' mentioned in the text of the context or question are sequential placeholders for images, which are fed at the same time as the textual information.
        You are given the context, the question, the student's answer and the student's explanation and the ground-truth answer. 
        Please use the given information and refer to the ground-truth answer to determine if the student's answer is correct.
        
        Question Format:
        {
            "question_id": "<unique_identifier>",
            "context": "<financial_context>",
            "type": "<multiple-choice|open-ended>",
            "question": "<question_text>",
            "student_answer": "<student's_answer>",
            "student_explanation": "<student's_explanation>",
            "ground_truth": "<correct_answer>"
        }

        Evaluation Guidelines:
        For multiple-choice questions:
        Correct if student's answer matches the ground truth content, regardless of format
        Example: If correct answer is "A. Stock market", both "A" and "Stock market" are considered correct
        Focus on whether the student selected the right concept/answer, not the format
        For open-ended questions:
        Compare key concepts and accuracy of student's response with ground truth
        Respond directly as either 'correct' or 'incorrect'.

        Your response must be in a standard JSON format and should follow this structure:
        ```json
        {
            "<question_id>": "correct" or "incorrect"
        }
        ```
        Now please evaluate the following response:
        {{question}}
        """
# eval_runner.py tests 'multiple_choice' (underscore) while the data says 'multiple-choice': the
# judge is never shown the options. Kept, so verdicts match the official judge's inputs.
OFFICIAL_JUDGE_OPTIONS_TYPE = "multiple_choice"
OFFICIAL_MAX_NEW_TOKENS = 1280
JUDGE_MAX_NEW_TOKENS = 64

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "famma-constrained-v1"  # bump whenever the template below changes: it is in the cache key
CONSTRAINED_INSTRUCTIONS = {
    SINGLE: "Answer with the letter of the single correct option.",
    MULTI: "Answer with the letters of all correct options, separated by ','.",
    OPEN: "Answer the question concisely; give a number where a number is asked.",
}
ANSWER_PREFIX = "Answer:"
RELATIVE_TOLERANCE = 0.01  # rule judge: a number within 1 % of the gold ...
ABSOLUTE_TOLERANCE = 1e-6  # ... or within this absolute distance (golds of 0)

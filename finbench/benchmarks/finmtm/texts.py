"""FinMTM's texts: the official prompts and judge rubrics byte for byte, the constrained template,
labels and limits."""

from __future__ import annotations

import re

from finbench.core.types import MULTI, SINGLE

NAME = "finmtm"
HUB_ID = "HiThink-Research/FinMTM"
HUB_SPLIT = "train"
GROUP_COLUMNS = ("question_type", "kind")  # breakdowns of the objective score
DOMAIN_FIELD = "task"  # the meta field --domain filters on (task: objective, dialogue, agent)
FORMS = ("objective chat JSONL (messages + choices)", "open-ended session JSONL (turns, image_paths)",
         "agent JSONL (question, image_path, ActionTrace, ToolResults)")
PROTOCOLS = ("constrained", "official (objective items); sessions and agent items: official generation")
METRICS = ("objective: Eq. 1 score and old exact-set protocol; dialogue: (0.5·turn + 0.5·session)×10 "
           "by --judge; agent: tool precision, recall, F2, Qt = 25·F2 (offline replay)")

OBJECTIVE, DIALOGUE, AGENT = "objective", "dialogue", "agent"
LEVELS = ("L1", "L2", "L3", "L4")

# ---- official texts -------------------------------------------------------------------------------
# inference/MTQA/inference.py OPEN_ENDED_SYSTEM_PROMPT (manuscript Figure 10)
OPEN_ENDED_SYSTEM_PROMPT = (
    "You are a financial expert. Read the current question, the supplied image(s), "
    "and the conversation history. Answer only the current question. Do not include "
    "explanations unless the question explicitly requires them."
)
OFFICIAL_MAX_NEW_TOKENS = 4096  # the official client's max_tokens
JUDGE_MAX_NEW_TOKENS = 4096  # judge/Agent/qwen3vl.py chat(max_tokens=4096), the MTQA judge's client
THINK_CLOSE = "</think>"  # the official client keeps a reply's text after the first one
BOX_MARKERS = re.compile(r"<\|begin_of_box\|>|<\|end_of_box\|>")
JUDGE_FIELDS = ("Visual_Precision", "Financial_Logic", "Data_Accuracy", "Cross_Modal_Verification",
                "Temporal_Awareness")
LEVEL_CHECKLISTS = {
    "L1": ("Comprehension", ("Entity_Recognition", "Spatial_Awareness")),
    "L2": ("Calculation", ("Multi_Step_Numerical_Calculation", "Chart_Numerical_Estimation")),
    "L3": ("Self-correction", ("Adversarial_Robustness", "Logical_Consistency")),
    "L4": ("Memory", ("Cross_Page_Entity_Linking", "Long_Context_Memory", "Multi_Source_Knowledge_Fusion")),
}
# judge/MTQA/judge/turn_judge.py: the auditor rubric, scale 0–10 per dimension
TURN_JUDGE_TEMPLATE = """You are a **Senior Financial Auditor & Quantitative Analyst**.
Your task is to audit an AI agent's performance in analyzing financial documents (Candlestick charts, Balance Sheets, Research Reports, Pie/Bar charts).

You apply **Institutional-Grade Standards**. In finance, a decimal error or a hallucinated trend results in millions of dollars in losses.
**Be extremely harsh. Do not forgive "minor" numerical errors.**

---
### 1. Financial Scoring Metrics (0-10 Scale)

**A. Visual Precision & OCR (视觉精度与数据提取)**
- 0: no usable answer or completely unsupported content
- 1-3: wrong row/col; confuses O/C or H/L; misses units
- 4-6: gets number but misses context
- 7-8: accurate reads and correct color code understanding
- 9-10: pixel-perfect tiny labels and complex interactions

**B. Financial Logic & Calculation (金融逻辑与计算)**
- 0: no valid financial reasoning
- 1-3: wrong formula; wrong trend description
- 4-6: correct calc but shallow interpretation
- 7-8: computes derived metrics correctly
- 9-10: multi-step synthesis like earnings quality

**C. Data Accuracy (数据准确性)**
- 0: no relevant data or entirely fabricated data
- 1-4: fatal: any digit/date wrong
- 5-6: lazy approximation
- 7-8: exact match
- 9-10: precise formatted output

**D. Cross-Modal Verification (多模态互证)**
- 0: no cross-modal grounding
- 1-3: hallucinates alignment
- 7-8: aligns table/chart with text correctly
- 9-10: finds discrepancies

**E. Temporal Awareness (时序敏感度)**
- 0: no temporal information when it is required
- 1: time blind
- 5: vague timeline
- 10: pinpoint timing

---
### 2. Evaluation Context
User Query: {q}
Model Answer: {pred}
Ground Truth: {gold}
Conversation History: {ctx}

---
### 3. JSON Output
{{
  "Visual_Precision": 0-10,
  "Financial_Logic": 0-10,
  "Data_Accuracy": 0-10,
  "Cross_Modal_Verification": 0-10,
  "Temporal_Awareness": 0-10,
  "Comment": "Specific critique."
}}"""
# judge/MTQA/judge/session_judge.py: the level checklist, 0–10 per item
SESSION_JUDGE_TEMPLATE = """You are a senior financial multimodal evaluator.
Evaluate the complete dialogue at the SESSION level. Do not answer the task.

Task label: {level} ({name})
Dialogue:
{dialogue}

Score every checklist item from 0 to 10. Judge factual correctness, financial
validity, grounding in the supplied visual evidence, and consistency across
turns. For L4, citation checks assess whether claims are traceable to the
retrieved page/document; formatting alone must not override factual quality.

Return JSON only:
{{
  "Checklist_Scores": {{
    {checklist}
  }},
  "Overall_Score": 0-10,
  "Pass": true,
  "Critique": "brief evidence-based explanation"
}}

Overall_Score must be the arithmetic mean of the checklist scores."""
AGENT_TOOLS = ("FinQuery", "StockNews", "AnalysisLib", "NoticeSearch", "VisitWeb")
# judge/Agent/prompts.py agent_sys_prompt, restated in English for the offline replay: the five
# tools, one JSON object per round with Thought / VisualObservation / ActionTrace.
AGENT_PROMPT = """You are a financial multi-turn analysis agent. Plan calls to the fixed tools step by step and use the image to complete the task.
Question: {question}

Available tools (the system executes your ActionTrace and returns the results):
1. FinQuery: market prices, valuation metrics, trading statistics and fundamentals.
2. StockNews: real-time stock news search.
3. AnalysisLib: structured financial analysis.
4. NoticeSearch: company announcements, disclosures and filings.
5. VisitWeb: read the main text of a given web page URL.

Output exactly one JSON object per round:
{{"Thought": "high-level reasoning and next step", "VisualObservation": ["evidence from the image"], "ActionTrace": [{{"tool": "FinQuery", "query": "company, metric and period"}}]}}

Do not repeat calls that already succeeded. When the task is complete, output <FINISHED> and your final conclusion."""
AGENT_OBSERVATION = "Tool results (recorded):\n{results}\nContinue: further tool calls if needed, else <FINISHED> and the final conclusion."
AGENT_ROUNDS = 2  # offline: plan, then one round after the recorded results

# ---- constrained protocol (finbench) -------------------------------------------------------------
PROMPT_VERSION = "finmtm-constrained-v1"  # bump whenever the texts below change: it is in the cache key
CONSTRAINED_INSTRUCTIONS = {
    SINGLE: "Answer with the letter of the single correct option.",
    MULTI: "Answer with the letters of all correct options, separated by ','.",
}
ANSWER_PREFIX = "Answer:"
_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[\.\)、:：．]\s*\S", re.MULTILINE)

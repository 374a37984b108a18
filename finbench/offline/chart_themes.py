"""What a synthetic chart is about: bar, line, pie, price and table themes (every entity is
fictional; the numbers are random)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

# ---------------------------------------------------------------------------------------------
# Themes: what a chart is about (all entities are fictional; numbers are random)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesTheme:
    """A bar or line series: one metric over periods."""

    domain: str
    asset_class: str
    subject: str  # "Northwind Industries revenue"
    metric: str  # "revenue", as used in questions
    unit: str  # "million USD" or "%"
    periods: str  # "quarters" | "years" | "months"
    level: tuple[float, float]  # range of the first value
    drift: float  # typical relative move per period
    places: int
    context: str
    change: str = "pct"  # numerical question: "pct" (percentage change) or "diff" (difference)


@dataclass(frozen=True)
class ShareTheme:
    """A pie: composition of a whole."""

    domain: str
    asset_class: str
    subject: str  # "Evergreen Balanced Fund asset allocation"
    whole: str  # "portfolio"
    part: str  # "asset class"
    segments: tuple[str, ...]
    total: tuple[float, float]  # range of the whole's size, for the 'value of segment' question
    total_unit: str
    context: str


@dataclass(frozen=True)
class PriceTheme:
    """A candlestick chart of daily prices."""

    domain: str
    asset_class: str
    name: str
    level: tuple[float, float]
    daily_vol: float  # relative
    places: int
    unit: str
    context: str


@dataclass(frozen=True)
class Ratio:
    name: str
    numerator: int  # column index
    denominator: int
    as_percent: bool


@dataclass(frozen=True)
class TableTheme:
    domain: str
    asset_class: str
    subject: str
    entity: str  # "company"
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    unit: str
    draw_row: Callable[[random.Random], list[float]]
    ratio1: Ratio  # single choice and numerical questions
    ratio2: Ratio  # multiple choice question
    context: str


BAR_THEMES = (
    SeriesTheme(
        "Corporate Finance", "Equity", subject="Northwind Industries quarterly revenue",
        metric="revenue", unit="million USD", periods="quarters", level=(180, 420), drift=0.08,
        places=1, context="Northwind Industries is a fictional mid-cap manufacturer that reports "
        "revenue quarterly.",
    ),
    SeriesTheme(
        "Banking", "Equity", subject="Harbor Bank net interest income",
        metric="net interest income", unit="million USD", periods="years", level=(600, 1500),
        drift=0.10, places=1, context="Harbor Bank is a fictional regional lender; net interest "
        "income is its main revenue line.",
    ),
    SeriesTheme(
        "Real Estate", "Real Estate", subject="Lakeside County new home sales",
        metric="the number of new home sales", unit="thousand units", periods="years",
        level=(20, 60), drift=0.12, places=1, context="New home sales count completed sales of "
        "newly built homes in the fictional Lakeside County.",
    ),
    SeriesTheme(
        "Funds & Asset Management", "Multi-asset",
        subject="Evergreen Capital assets under management", metric="total AUM",
        unit="billion USD", periods="years", level=(40, 120), drift=0.10, places=1,
        context="Evergreen Capital is a fictional asset manager; AUM is measured at each year end.",
    ),
    SeriesTheme(
        "Macroeconomics", "Macro", subject="Aldoria merchandise exports",
        metric="the value of merchandise exports", unit="billion USD", periods="years",
        level=(150, 400), drift=0.07, places=1, context="Aldoria is a fictional open economy "
        "whose exports are dominated by manufactured goods.",
    ),
    SeriesTheme(
        "Commodities", "Commodities", subject="Copperline Mining copper output",
        metric="copper output", unit="thousand tonnes", periods="quarters", level=(80, 200),
        drift=0.09, places=1, context="Copperline Mining is a fictional producer operating two "
        "open-pit copper mines.",
    ),
)  # fmt: skip

LINE_THEMES = (
    SeriesTheme(
        "Bond Market", "Fixed Income", subject="Aldoria 10-year government bond yield",
        metric="the 10-year yield", unit="%", periods="months", level=(2.5, 4.5), drift=0.04,
        places=2, change="diff", context="Yields are month-end values of the fictional Aldorian "
        "10-year benchmark bond.",
    ),
    SeriesTheme(
        "Macroeconomics", "Macro", subject="Aldoria CPI inflation (year over year)",
        metric="CPI inflation", unit="%", periods="months", level=(2.0, 7.0), drift=0.06,
        places=1, change="diff", context="Inflation is the year-over-year change of Aldoria's "
        "consumer price index.",
    ),
    SeriesTheme(
        "Foreign Exchange", "Foreign Exchange", subject="ALD/USD exchange rate",
        metric="the ALD/USD rate", unit="USD per ALD", periods="months", level=(1.05, 1.35),
        drift=0.015, places=4, context="Rates are month-end fixings of the fictional Aldorian "
        "dollar against the US dollar.",
    ),
    SeriesTheme(
        "Commodities", "Commodities", subject="Gold spot price", metric="the gold price",
        unit="USD per ounce", periods="months", level=(1700, 2100), drift=0.03, places=0,
        context="Prices are illustrative month-end spot prices.",
    ),
    SeriesTheme(
        "Stock Market", "Equity", subject="Aldoria Composite Index", metric="the index",
        unit="points", periods="months", level=(3200, 4800), drift=0.04, places=0,
        context="The Aldoria Composite is a fictional capitalisation-weighted equity index.",
    ),
)  # fmt: skip

PIE_THEMES = (
    ShareTheme(
        "Funds & Asset Management", "Multi-asset",
        subject="Evergreen Balanced Fund asset allocation", whole="portfolio", part="asset class",
        segments=("Equities", "Government bonds", "Corporate bonds", "Real estate", "Commodities",
                  "Cash"),
        total=(2, 20), total_unit="billion USD", context="Evergreen Balanced Fund is a fictional "
        "multi-asset fund; weights are at quarter end.",
    ),
    ShareTheme(
        "Corporate Finance", "Equity", subject="Northwind Industries revenue by segment",
        whole="revenue", part="segment",
        segments=("Industrial", "Consumer", "Healthcare", "Energy", "Services", "Other"),
        total=(800, 2000), total_unit="million USD", context="Segment revenue is reported for "
        "the fictional Northwind Industries' last fiscal year.",
    ),
    ShareTheme(
        "Banking", "Fixed Income", subject="Harbor Bank loan portfolio by type",
        whole="loan portfolio", part="loan type",
        segments=("Residential mortgages", "Commercial real estate", "Corporate loans",
                  "Consumer loans", "Credit cards", "SME loans"),
        total=(20, 60), total_unit="billion USD",
        context="Shares are of gross loans of the fictional Harbor Bank at year end.",
    ),
    ShareTheme(
        "Foreign Exchange", "Foreign Exchange",
        subject="Aldoria central bank FX reserves by currency", whole="reserves", part="currency",
        segments=("USD", "EUR", "JPY", "GBP", "CNY", "Other"),
        total=(50, 300), total_unit="billion USD", context="Reserves are the fictional Aldorian "
        "central bank's foreign-currency holdings.",
    ),
    ShareTheme(
        "Insurance", "Equity", subject="Shieldline Insurance gross written premiums by line",
        whole="gross written premiums", part="business line",
        segments=("Motor", "Property", "Health", "Life", "Liability", "Marine"),
        total=(500, 3000), total_unit="million USD",
        context="Shieldline Insurance is a fictional multi-line insurer.",
    ),
)  # fmt: skip

PRICE_THEMES = (
    PriceTheme(
        "Stock Market", "Equity", name="NWND (Northwind Industries)", level=(40, 120),
        daily_vol=0.02, places=2, unit="USD",
        context="NWND is the fictional ticker of Northwind Industries' common stock.",
    ),
    PriceTheme(
        "Commodities", "Commodities", name="Aldoria crude oil futures", level=(65, 95),
        daily_vol=0.02, places=2, unit="USD per barrel",
        context="Prices are front-month futures settlements of a fictional crude grade.",
    ),
    PriceTheme(
        "Foreign Exchange", "Foreign Exchange", name="ALD/USD", level=(1.05, 1.35),
        daily_vol=0.005, places=4, unit="USD per ALD",
        context="ALD/USD quotes the fictional Aldorian dollar in US dollars.",
    ),
    PriceTheme(
        "Stock Market", "Equity", name="Aldoria Composite Index", level=(3200, 4800),
        daily_vol=0.01, places=1, unit="points",
        context="The Aldoria Composite is a fictional capitalisation-weighted equity index.",
    ),
)  # fmt: skip


def _company_row(rng: random.Random) -> list[float]:
    revenue = rng.uniform(800, 6000)
    equity = rng.uniform(300, 3000)
    return [revenue, revenue * rng.uniform(0.02, 0.18), equity * rng.uniform(0.3, 2.2), equity]


def _bank_row(rng: random.Random) -> list[float]:
    deposits = rng.uniform(20_000, 90_000)
    assets = deposits * rng.uniform(1.15, 1.5)
    return [deposits * rng.uniform(0.6, 1.1), deposits, assets * rng.uniform(0.004, 0.016), assets]


def _insurer_row(rng: random.Random) -> list[float]:
    premiums = rng.uniform(1_000, 9_000)
    return [premiums, premiums * rng.uniform(0.5, 0.85), premiums * rng.uniform(0.18, 0.35),
            premiums * rng.uniform(0.04, 0.12)]  # fmt: skip


def _reit_row(rng: random.Random) -> list[float]:
    value = rng.uniform(2_000, 15_000)
    noi = value * rng.uniform(0.04, 0.08)
    return [noi * rng.uniform(1.3, 1.6), noi, value, value * rng.uniform(0.25, 0.6)]


TABLE_THEMES = (
    TableTheme(
        "Corporate Finance", "Equity", subject="Selected financials of peer companies, FY2023",
        entity="company",
        rows=("Northwind", "Contoso", "Fabrikam", "Tailspin", "Litware", "Adatum"),
        columns=("Revenue", "Net income", "Total debt", "Equity"), unit="million USD",
        draw_row=_company_row, ratio1=Ratio("net profit margin", 1, 0, True),
        ratio2=Ratio("debt-to-equity ratio", 2, 3, False),
        context="All companies are fictional; net profit margin = net income / revenue.",
    ),
    TableTheme(
        "Banking", "Equity", subject="Balance sheet highlights of regional banks, 2023",
        entity="bank", rows=("Harbor", "Summit", "Riverside", "Keystone", "Pinecrest", "Bayview"),
        columns=("Loans", "Deposits", "Net income", "Total assets"), unit="million USD",
        draw_row=_bank_row, ratio1=Ratio("return on assets", 2, 3, True),
        ratio2=Ratio("loan-to-deposit ratio", 0, 1, True),
        context="All banks are fictional; return on assets = net income / total assets.",
    ),
    TableTheme(
        "Insurance", "Equity", subject="Underwriting results of insurers, 2023",
        entity="insurer",
        rows=("Shieldline", "Anchor", "Meridian", "Beacon", "Crestview", "Oakmont"),
        columns=("Premiums", "Claims", "Expenses", "Inv. income"), unit="million USD",
        draw_row=_insurer_row, ratio1=Ratio("loss ratio", 1, 0, True),
        ratio2=Ratio("expense ratio", 2, 0, True),
        context="All insurers are fictional; loss ratio = claims / premiums.",
    ),
    TableTheme(
        "Real Estate", "Real Estate", subject="Portfolio metrics of listed REITs, 2023",
        entity="REIT", rows=("Lakeside", "Granite", "Urbanis", "Cedar", "Harborview", "Stonegate"),
        columns=("Rental income", "NOI", "Property value", "Debt"), unit="million USD",
        draw_row=_reit_row, ratio1=Ratio("cap rate", 1, 2, True),
        ratio2=Ratio("loan-to-value ratio", 3, 2, True),
        context="All REITs are fictional; cap rate = net operating income / property value.",
    ),
)  # fmt: skip

"""``esg plan``: placeholder until the search lands."""


def register(sub):
    p = sub.add_parser("plan", help="show ESG_1Q's plan for an app")
    p.set_defaults(func=lambda a: 0)

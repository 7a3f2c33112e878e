"""The code of an ESG app action (annotations esg-slo-ms and esg-dag define the app).

The ESG scheduler expands an activation of the app into jobs for its DAG's functions and never runs
this code. It only runs when an app action is invoked on an OpenWhisk without the ESG scheduler
attached, and then it says so instead of returning a wrong answer.
"""


def main(args):
    return {"error": "this action is an ESG app (annotations esg-slo-ms, esg-dag): its functions are "
                     "run by the ESG scheduler, which is not attached to this OpenWhisk deployment; "
                     "start it (esg scheduler) or invoke the functions directly"}

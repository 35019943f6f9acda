"""What a fit shows while it runs: nothing (``verbose=0``), a tqdm bar
where tqdm is installed and a line a REML iteration on stderr where it is
not (``verbose=1``), or a line per Newton and REML iteration
(``verbose=2``). The compiled fit calls ``Progress`` with an event dict
at each iteration; Ctrl-C stops the fit with KeyboardInterrupt."""

import sys


def _lambda(event):
    return "[" + ", ".join(f"{v:.3e}" for v in event.get("lambda", [])) + "]"


class Progress:
    def __init__(self, verbose, what):
        self.verbose = int(verbose or 0)
        self.bar = None
        if self.verbose == 1:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(desc=what, unit=" REML it", leave=False)

    @property
    def callback(self):
        """The callback for the compiled fit; None when nothing is shown."""
        return self if self.verbose > 0 else None

    def __call__(self, event):
        kind = event["kind"]
        if self.bar is not None:
            if kind == "reml":
                self.bar.update(1)
                self.bar.set_postfix_str(f"V {event['score']:.6f} lambda {_lambda(event)}")
            return
        if kind == "reml":
            self._line(
                f"REML iteration {event['iteration']}: V {event['score']:.6f}, lambda {_lambda(event)}, "
                f"evaluations {event['evaluations']} ({event['seconds']:.1f} s)"
            )
        elif self.verbose >= 2:
            self._line(
                f"  Newton step: objective {event['objective']:.6f}, decrement {event['decrement']:.3e} "
                f"({event['seconds']:.1f} s)"
            )

    @staticmethod
    def _line(text):
        print(text, file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()

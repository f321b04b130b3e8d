#ifndef BG_TRAIN_RUN_REPORT_H
#define BG_TRAIN_RUN_REPORT_H
// The run report: one self-contained HTML file drawn from metrics logs (JSON Lines,
// train/metrics.h). The page (train/run_report_page.html, built into the library) holds
// the logs as JSON and draws every chart with its own inline script: no network.
//
// Every line of every log must be a JSON object; a log with none is an error. The
// file is written under a temporary name and renamed over out_path, so a browser (or
// a reader of --report-every's file) never sees half a page. BG_ERR with bg_error
// naming the file (and line) otherwise; *bad_input (may be NULL) is then 1 when a log
// was at fault, 0 when writing the page failed.
int run_report_write(const char *const *logs, int n_logs, const char *out_path, int *bad_input);
#endif

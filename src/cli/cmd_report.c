// bagualu report: metrics logs as one self-contained HTML page (train/run_report.h).
#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "train/run_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// LOG.jsonl -> LOG.html (any other name gets ".html" appended); caller frees.
char *cli_report_path_for(const char *log) {
    size_t n = strlen(log);
    const char *ext = ".jsonl";
    size_t e = strlen(ext);
    size_t stem = n > e && !strcmp(log + n - e, ext) ? n - e : n;
    char *out = malloc(stem + 6);
    if (!out) return NULL;
    memcpy(out, log, stem);
    memcpy(out + stem, ".html", 6);
    return out;
}

int cmd_report(int argc, char **argv) {
    const char *out = NULL;
    const arg_spec specs[] = {
        {"out", ARG_STR, &out, 0, "the HTML file (default: the first log's name with .html)"},
    };
    int n = (int)(sizeof specs / sizeof specs[0]);
    if (args_help(specs, n, argc, argv, "report",
                  "Draw metrics logs (train --log) as one self-contained HTML report: report [--out FILE] LOG.jsonl..."))
        return 0;
    char **files = malloc(sizeof(char *) * ((size_t)argc + 1));
    if (!files) return 3;
    int nfiles;
    int nflags = args_split_files(specs, n, argc, argv, files, &nfiles);
    int rc = 0;
    char *derived = NULL;
    if (args_parse(specs, n, nflags, argv, "report") != BG_OK) rc = 2;
    else if (nfiles == 0) rc = (bg_error("report: no metrics log given (bagualu report LOG.jsonl...)"), 2);
    else if (!out && !(out = derived = cli_report_path_for(files[0]))) rc = 3;
    int bad_input = 0;
    if (!rc && run_report_write((const char *const *)files, nfiles, out, &bad_input) != BG_OK)
        rc = bad_input ? 2 : 1;
    if (rc) fprintf(stderr, "bagualu: %s\n", bg_last_error());
    else printf("report: %s (%d run%s)\n", out, nfiles, nfiles > 1 ? "s" : "");
    free(derived);
    free(files);
    return rc;
}

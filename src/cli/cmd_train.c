#include "core/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "train/train_flags.h"
#include "train/trainer.h"

#include <ctype.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static volatile int stop_requested = 0;  // int is sig_atomic_t on the targets

static void on_stop_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

// "bagualu train --flag value ...", each argument quoted for a shell when it needs it.
static char *command_line_of(int argc, char **argv) {
    size_t n = strlen("bagualu train") + 1;
    for (int i = 0; i < argc; i++) n += 4 * strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    if (!s) return NULL;
    p += sprintf(p, "bagualu train");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = *a != '\0';
        for (const char *c = a; *c; c++)
            plain &= isalnum((unsigned char)*c) || strchr("-_./=:,+@%", *c) != NULL;
        *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') p += sprintf(p, "'\\''");
            else *p++ = *c;
        }
        *p++ = '\'';
    }
    *p = '\0';
    return s;
}

int cmd_train(int argc, char **argv) {
    train_flags *f = bg_malloc(sizeof *f);  // the flag table points into it
    train_flags_init(f);
    train_options *o = &f->o;
    if (args_help(f->specs, f->count, argc, argv, "train",
                  "Train a MoE transformer on a token shard.")) {
        free(f);
        return 0;
    }
    if (args_parse(f->specs, f->count, argc, argv, "train") != BG_OK || train_flags_finish(f) != BG_OK) {
        fprintf(stderr, "bagualu: %s\n", bg_last_error());
        free(f);
        return 2;
    }
    // SIGINT/SIGTERM ask for a checkpoint at the next step boundary and a clean exit.
    // SA_RESETHAND: a second Ctrl-C kills at once (checkpoints are atomic, so that is
    // safe even mid-save). No SA_RESTART: the writers retry EINTR themselves.
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    o->stop_requested = &stop_requested;
    char *command_line = command_line_of(argc, argv);
    char *report_path = NULL;
    if (!o->report_path && o->report_every > 0 && o->log_path)
        o->report_path = report_path = cli_report_path_for(o->log_path);
    o->command_line = command_line;
    int report = 1;
    int rc = trainer_run(o, &report);
    free(command_line);
    free(report_path);
    free(f);
    if (rc != TRAIN_OK && report) fprintf(stderr, "bagualu: %s\n", bg_last_error());
    return rc;
}

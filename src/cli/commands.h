#ifndef BG_CLI_COMMANDS_H
#define BG_CLI_COMMANDS_H
// Each verb of `bagualu <verb>`: returns the process exit code
// (0 success, 2 bad input, 1 a failure while running). main() makes it 3 when the
// error the verb printed is out of memory (bg_last_error_is_out_of_memory).
int cmd_train(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_plan_probe(int argc, char **argv);  // hidden: the MPI link probe of plan --calibrate
int cmd_report(int argc, char **argv);
int cmd_import(int argc, char **argv);
// LOG.jsonl -> LOG.html, the report beside its log (caller frees; NULL: out of memory).
char *cli_report_path_for(const char *log);
#endif

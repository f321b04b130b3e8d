#ifndef BG_CORE_ARGS_H
#define BG_CORE_ARGS_H
// "--name value" flags: every value is checked fully (no trailing junk, in range),
// unknown flags and missing values are errors naming the flag.
typedef enum { ARG_STR, ARG_INT, ARG_LONG, ARG_FLOAT, ARG_U64, ARG_SWITCH } arg_kind;

typedef struct {
    const char *name;   // without the leading "--"
    arg_kind kind;
    void *dest;         // const char **, int *, long *, float *, uint64_t *, int * (switch)
    int required;
    const char *help;
} arg_spec;

int args_parse(const arg_spec *specs, int count, int argc, char **argv, const char *verb);
void args_usage(const arg_spec *specs, int count, const char *verb, const char *summary);
// When argv asks for help (--help or -h anywhere), prints the usage and returns 1: the
// command then exits 0 without parsing the rest.
int args_help(const arg_spec *specs, int count, int argc, char **argv, const char *verb,
              const char *summary);
// For verbs that take files after their flags: moves the arguments that are neither
// flags nor flag values to files[] (room for argc; "-" is a file), leaving the flags at
// the front of argv for args_parse. Returns the number of flag arguments.
int args_split_files(const arg_spec *specs, int count, int argc, char **argv, char **files, int *nfiles);
// One flag by name (without "--") and its value as text, checked as args_parse checks
// it (a switch takes "0" or "1"): the library's options are the CLI's flags.
int args_set(const arg_spec *specs, int count, const char *name, const char *value, const char *verb);
#endif

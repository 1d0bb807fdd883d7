# SPDX-License-Identifier: BSL-1.0
# Tests of the AMR mini-app, on a problem small enough for CI (64^3 at the finest level):
# conservation, the Courier runs at 1, 2 and 4 localities and the MPI version agreeing, a
# restart equal to the uninterrupted run (also on another number of localities), the Sedov
# shock radius, and bad checkpoints refused.
set(amr_dir ${CMAKE_CURRENT_BINARY_DIR}/test-output)
file(MAKE_DIRECTORY ${amr_dir})
set(amr_env "COURIER_BIND=none;COURIER_THREADS=2")
set(amr_timeout 300)
# Checkpoints after an ordinary step and after a regrid step (every 4th).
if(COURIER_SANITIZER) # two levels: the same code paths at a fifth of the cost
    set(amr_problem --max-level=1 --t-end=0.02 --check)
    set(amr_plain 10)
    set(amr_regrid 12)
else()
    set(amr_problem --max-level=2 --t-end=0.02 --check)
    set(amr_plain 42)
    set(amr_regrid 44)
endif()

function(amr_courier_test name localities)
    add_test(NAME amr.${name} COMMAND courier_run -n ${localities} --courier-run-job-timeout=240
        $<TARGET_FILE:amr_courier> --courier:spmd=1 ${ARGN})
    set_tests_properties(amr.${name} PROPERTIES TIMEOUT ${amr_timeout} ENVIRONMENT "${amr_env}"
        FAIL_REGULAR_EXPRESSION "FAILED")
endfunction()

# Conservation on 1, 2 and 4 localities; each run's final state is compared below.
foreach(n 1 2 4)
    amr_courier_test(courier.conserves.${n} ${n} ${amr_problem} --dump=${amr_dir}/courier.${n}.dump)
    set_tests_properties(amr.courier.conserves.${n} PROPERTIES FIXTURES_SETUP amr_courier_${n}
        PASS_REGULAR_EXPRESSION "conservation ok")
endforeach()
foreach(n 2 4)
    add_test(NAME amr.courier.${n}_localities_agree_with_1
        COMMAND amr_compare ${amr_dir}/courier.1.dump ${amr_dir}/courier.${n}.dump --tolerance=0)
    set_tests_properties(amr.courier.${n}_localities_agree_with_1 PROPERTIES
        FIXTURES_REQUIRED "amr_courier_1;amr_courier_${n}" PASS_REGULAR_EXPRESSION "agree")
endforeach()

# Restart: a checkpoint after a regrid step and after an ordinary one, restarted on another
# number of localities, ends bit-identical to the run that wrote it.
foreach(at ${amr_plain} ${amr_regrid})
    amr_courier_test(checkpoint.${at} 2 ${amr_problem} --checkpoint=${amr_dir}/at${at}.ckpt
        --checkpoint-at=${at} --dump=${amr_dir}/uninterrupted.${at}.dump)
    set_tests_properties(amr.checkpoint.${at} PROPERTIES FIXTURES_SETUP amr_checkpoint_${at}
        PASS_REGULAR_EXPRESSION "checkpoint of step ${at}")
endforeach()
foreach(case "${amr_plain}:3" "${amr_regrid}:1" "${amr_regrid}:4") # step:localities
    string(REPLACE ":" ";" case "${case}")
    list(GET case 0 at)
    list(GET case 1 n)
    amr_courier_test(restart.${at}.on_${n} ${n} ${amr_problem} --restart=${amr_dir}/at${at}.ckpt
        --dump=${amr_dir}/restarted.${at}.${n}.dump)
    set_tests_properties(amr.restart.${at}.on_${n} PROPERTIES
        FIXTURES_REQUIRED amr_checkpoint_${at} FIXTURES_SETUP amr_restart_${at}_${n})
    add_test(NAME amr.restart.${at}.on_${n}.equals_continuing
        COMMAND amr_compare ${amr_dir}/uninterrupted.${at}.dump
        ${amr_dir}/restarted.${at}.${n}.dump --tolerance=0)
    set_tests_properties(amr.restart.${at}.on_${n}.equals_continuing PROPERTIES
        FIXTURES_REQUIRED "amr_checkpoint_${at};amr_restart_${at}_${n}"
        PASS_REGULAR_EXPRESSION "agree")
endforeach()

# A checkpoint cut short, and one restarted with other options: a clear error, no run.
add_test(NAME amr.restart.refuses_a_truncated_checkpoint
    COMMAND sh -c "head -c 100000 '${amr_dir}/at${amr_plain}.ckpt' > '${amr_dir}/truncated.ckpt' && \
exec \"$1\" -n 1 \"$2\" --courier:spmd=1 --max-level=2 --restart='${amr_dir}/truncated.ckpt'"
    sh $<TARGET_FILE:courier_run> $<TARGET_FILE:amr_courier>)
add_test(NAME amr.restart.refuses_other_options
    COMMAND courier_run -n 1 $<TARGET_FILE:amr_courier> --courier:spmd=1 --max-level=3
    --restart=${amr_dir}/at${amr_plain}.ckpt)
set_tests_properties(amr.restart.refuses_a_truncated_checkpoint amr.restart.refuses_other_options
    PROPERTIES FIXTURES_REQUIRED amr_checkpoint_${amr_plain} TIMEOUT 60 ENVIRONMENT "${amr_env}")
set_tests_properties(amr.restart.refuses_a_truncated_checkpoint PROPERTIES
    PASS_REGULAR_EXPRESSION "courier_main threw: .*truncated.ckpt")
set_tests_properties(amr.restart.refuses_other_options PROPERTIES
    PASS_REGULAR_EXPRESSION "courier_main threw: amr: .* --max-level=[12]; give the same options")

# The Sedov-Taylor shock radius within 5 % of the exact one at t = 0.09 (64^3 finest): numerics
# only, and 300 steps, so in the optimized build alone.
if(NOT COURIER_SANITIZER)
    amr_courier_test(sedov_shock_radius 2 --max-level=2 --t-end=0.09 --check
        --dump=${amr_dir}/sedov.dump)
    set_tests_properties(amr.sedov_shock_radius PROPERTIES
        PASS_REGULAR_EXPRESSION "within 5 % ok")
endif()

# The Kelvin-Helmholtz shear layer (--problem=kh): conserved, and the same bits on 1 and 2
# localities (and, below, in the MPI version); in the optimized build, the instability grows
# by t = 1.2 (32^3 finest, 300 steps), and without shear the same check fails.
set(amr_kh --problem=kh --max-level=1 --check)
foreach(n 1 2)
    amr_courier_test(kh.courier.conserves.${n} ${n} ${amr_kh} --t-end=0.05
        --dump=${amr_dir}/kh.courier.${n}.dump)
    set_tests_properties(amr.kh.courier.conserves.${n} PROPERTIES FIXTURES_SETUP amr_kh_${n}
        PASS_REGULAR_EXPRESSION "conservation ok")
endforeach()
add_test(NAME amr.kh.courier.2_localities_agree_with_1
    COMMAND amr_compare ${amr_dir}/kh.courier.1.dump ${amr_dir}/kh.courier.2.dump --tolerance=0)
set_tests_properties(amr.kh.courier.2_localities_agree_with_1 PROPERTIES
    FIXTURES_REQUIRED "amr_kh_1;amr_kh_2" PASS_REGULAR_EXPRESSION "agree")
# A problem it does not know is refused by name.
add_test(NAME amr.unknown_problem_is_refused COMMAND courier_run -n 1
    $<TARGET_FILE:amr_courier> --courier:spmd=1 --problem=sod)
set_tests_properties(amr.unknown_problem_is_refused PROPERTIES ENVIRONMENT "${amr_env}"
    PASS_REGULAR_EXPRESSION "amr: --problem is sedov or kh, not 'sod'")
if(NOT COURIER_SANITIZER)
    amr_courier_test(kh.instability_grows 2 ${amr_kh} --t-end=1.2)
    set_tests_properties(amr.kh.instability_grows PROPERTIES
        PASS_REGULAR_EXPRESSION "the instability grows\\): ok")
    add_test(NAME amr.kh.without_shear_the_growth_check_fails COMMAND courier_run -n 2
        --courier-run-job-timeout=240 $<TARGET_FILE:amr_courier> --courier:spmd=1 ${amr_kh}
        --t-end=1.2 --kh-shear=0)
    set_tests_properties(amr.kh.without_shear_the_growth_check_fails PROPERTIES
        TIMEOUT ${amr_timeout} ENVIRONMENT "${amr_env}"
        PASS_REGULAR_EXPRESSION "conservation ok.*the instability grows\\): FAILED")
endif()

# The plain MPI version, and the Courier program over the MPI parcelport, agree with Courier.
find_program(AMR_MPIRUN mpirun)
if(AMR_MPIRUN AND TARGET amr_mpi)
    set(amr_mpirun ${AMR_MPIRUN} --allow-run-as-root --oversubscribe --bind-to none)
    set(amr_mpi_env ${amr_env})
    if(COURIER_SANITIZER MATCHES "address") # OpenMPI's own allocations: tests/distributed
        list(APPEND amr_mpi_env "ASAN_OPTIONS=detect_leaks=0")
    endif()
    foreach(n 2 4)
        add_test(NAME amr.mpi.conserves.${n} COMMAND ${amr_mpirun} -np ${n}
            $<TARGET_FILE:amr_mpi> ${amr_problem} --dump=${amr_dir}/mpi.${n}.dump)
        set_tests_properties(amr.mpi.conserves.${n} PROPERTIES TIMEOUT ${amr_timeout}
            ENVIRONMENT "${amr_mpi_env}" FIXTURES_SETUP amr_mpi_${n}
            PASS_REGULAR_EXPRESSION "conservation ok" FAIL_REGULAR_EXPRESSION "FAILED")
        if(n EQUAL 2)
            add_test(NAME amr.kh.mpi.conserves.2 COMMAND ${amr_mpirun} -np 2
                $<TARGET_FILE:amr_mpi> ${amr_kh} --t-end=0.05 --dump=${amr_dir}/kh.mpi.2.dump)
            set_tests_properties(amr.kh.mpi.conserves.2 PROPERTIES TIMEOUT ${amr_timeout}
                ENVIRONMENT "${amr_mpi_env}" FIXTURES_SETUP amr_kh_mpi_2
                PASS_REGULAR_EXPRESSION "conservation ok" FAIL_REGULAR_EXPRESSION "FAILED")
            add_test(NAME amr.kh.mpi.agrees_with_courier
                COMMAND amr_compare ${amr_dir}/kh.courier.1.dump ${amr_dir}/kh.mpi.2.dump
                --tolerance=1e-12)
            set_tests_properties(amr.kh.mpi.agrees_with_courier PROPERTIES
                FIXTURES_REQUIRED "amr_kh_1;amr_kh_mpi_2" PASS_REGULAR_EXPRESSION "agree")
        endif()
        add_test(NAME amr.mpi.${n}_ranks_agree_with_courier
            COMMAND amr_compare ${amr_dir}/courier.1.dump ${amr_dir}/mpi.${n}.dump
            --tolerance=1e-12)
        set_tests_properties(amr.mpi.${n}_ranks_agree_with_courier PROPERTIES
            FIXTURES_REQUIRED "amr_courier_1;amr_mpi_${n}" PASS_REGULAR_EXPRESSION "agree")
    endforeach()
    if(COURIER_HAVE_MPI)
        add_test(NAME amr.courier_over_mpi_parcelport.conserves.2 COMMAND ${amr_mpirun} -np 2
            $<TARGET_FILE:amr_courier> --courier:spmd=1 --courier:parcelport=mpi ${amr_problem}
            --dump=${amr_dir}/courier-mpi.2.dump)
        set_tests_properties(amr.courier_over_mpi_parcelport.conserves.2 PROPERTIES
            TIMEOUT ${amr_timeout} ENVIRONMENT "${amr_mpi_env}" FIXTURES_SETUP amr_courier_mpi_2
            PASS_REGULAR_EXPRESSION "conservation ok" FAIL_REGULAR_EXPRESSION "FAILED")
        add_test(NAME amr.courier_over_mpi_parcelport.agrees
            COMMAND amr_compare ${amr_dir}/courier.1.dump ${amr_dir}/courier-mpi.2.dump
            --tolerance=0)
        set_tests_properties(amr.courier_over_mpi_parcelport.agrees PROPERTIES
            FIXTURES_REQUIRED "amr_courier_1;amr_courier_mpi_2" PASS_REGULAR_EXPRESSION "agree")
    endif()
else()
    message(STATUS "amr: no mpirun or MPI: the MPI version's tests are not built")
endif()

# Across hosts: 3 network-namespace hosts (tests/cluster), tcp between them and shm within each.
# Six localities through courier-run's host file, and the MPI version on 4 ranks through mpirun
# (--map-by node), end where the one-locality run ends. Built with Courier's own tree only.
set(amr_cluster ${CMAKE_CURRENT_SOURCE_DIR}/../../tests/cluster/netns-cluster)
if(EXISTS ${amr_cluster})
    set(amr_cluster ${amr_cluster} --hosts=3 --slots=2 --)
    string(JOIN " " amr_on_hosts $<TARGET_FILE:courier_run> -n 6 --courier-run-job-timeout=240
        --hostfile=\$COURIER_CLUSTER_HOSTFILE --agent=\$COURIER_CLUSTER_AGENT)
    string(JOIN " " amr_cluster_args ${amr_problem})
    add_test(NAME amr.cluster.courier_run.conserves.3x2
        COMMAND ${amr_cluster} sh -c "exec ${amr_on_hosts} $<TARGET_FILE:amr_courier> \
--courier:spmd=1 --courier:bind=none ${amr_cluster_args} --dump=${amr_dir}/cluster.6.dump")
    set_tests_properties(amr.cluster.courier_run.conserves.3x2 PROPERTIES
        TIMEOUT ${amr_timeout} ENVIRONMENT "${amr_env}" FIXTURES_SETUP amr_cluster_6
        PASS_REGULAR_EXPRESSION "conservation ok" FAIL_REGULAR_EXPRESSION "FAILED"
        SKIP_RETURN_CODE 77)
    add_test(NAME amr.cluster.courier_run.agrees_with_1
        COMMAND amr_compare ${amr_dir}/courier.1.dump ${amr_dir}/cluster.6.dump --tolerance=0)
    set_tests_properties(amr.cluster.courier_run.agrees_with_1 PROPERTIES
        FIXTURES_REQUIRED "amr_courier_1;amr_cluster_6" PASS_REGULAR_EXPRESSION "agree")
    if(AMR_MPIRUN AND TARGET amr_mpi)
        string(JOIN " " amr_mpirun_hosts ${AMR_MPIRUN} --allow-run-as-root -np 4 --map-by node
            --bind-to none --hostfile \$COURIER_CLUSTER_HOSTFILE
            --mca plm_rsh_agent \$COURIER_CLUSTER_AGENT --mca oob_tcp_if_include 198.18.0.0/15
            --mca btl_tcp_if_include 198.18.0.0/15)
        add_test(NAME amr.cluster.mpi.conserves.4
            COMMAND ${amr_cluster} sh -c "exec ${amr_mpirun_hosts} $<TARGET_FILE:amr_mpi> \
${amr_cluster_args} --dump=${amr_dir}/cluster-mpi.4.dump")
        set_tests_properties(amr.cluster.mpi.conserves.4 PROPERTIES
            TIMEOUT ${amr_timeout} ENVIRONMENT "${amr_mpi_env}" FIXTURES_SETUP amr_cluster_mpi_4
            PASS_REGULAR_EXPRESSION "conservation ok" FAIL_REGULAR_EXPRESSION "FAILED"
            SKIP_RETURN_CODE 77)
        add_test(NAME amr.cluster.mpi.agrees_with_courier
            COMMAND amr_compare ${amr_dir}/courier.1.dump ${amr_dir}/cluster-mpi.4.dump
            --tolerance=1e-12)
        set_tests_properties(amr.cluster.mpi.agrees_with_courier PROPERTIES
            FIXTURES_REQUIRED "amr_courier_1;amr_cluster_mpi_4" PASS_REGULAR_EXPRESSION "agree")
    endif()
endif()

# A dump cut short: amr_compare names it and fails (exit 2), it does not compare garbage.
add_test(NAME amr.compare.refuses_a_truncated_dump
    COMMAND sh -c "head -c 5000 '${amr_dir}/courier.1.dump' > '${amr_dir}/truncated.dump'; \
out=$(\"$1\" '${amr_dir}/courier.1.dump' '${amr_dir}/truncated.dump' 2>&1); \
echo \"$out (exit $?)\""
    sh $<TARGET_FILE:amr_compare>)
set_tests_properties(amr.compare.refuses_a_truncated_dump PROPERTIES
    FIXTURES_REQUIRED amr_courier_1
    PASS_REGULAR_EXPRESSION "truncated.dump is truncated \\(exit 2\\)")

# Picture 2: score q^T A(t - s) k against distance, q = k random (scores.dat).
load "common.gp"
set output outdir . "/scores.png"
set title "What each encoding sees: score q^T A(t - s) q against distance (same random q)"
set xlabel "distance t - s (tokens)"
set ylabel "score"
set key top right font ",9"
set yrange [-1.2:1.8]
set xrange [0:512]
plot dat("scores.dat") u 1:2 w l lw 2 t "RoPE (theta 1e4, d 128)", \
     "" u 1:3 w l lw 2 t "xPos (d 128)", \
     "" u 1:4 w l lw 2 t "RetNet head 0 (gamma 1-2^-5)", \
     "" u 1:5 w l lw 2 t "RetNet head 1 (gamma 1-2^-6)", \
     "" u 1:6 w l lw 4 lc rgb "#bbbbbb" t "ALiBi m=2^-8, JordanBlock<2> form", \
     "" u 1:7 w l lw 1 dt 2 lc rgb "black" t "ALiBi m=2^-8, bias q.k - m(t-s)", \
     "" u 1:8 w l lw 2 t "RoPE + JordanBlock<3>{-1/16}"
